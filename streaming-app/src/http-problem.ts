// RFC 9457 problem details, the only error body the app's HTTP endpoints send. No stack traces.
import type { IncomingMessage, ServerResponse } from 'node:http';

export type Problem = {
  type: string;
  title: string;
  status: number;
  detail: string;
  /** Extension member: the request field at fault, when there is one. */
  field?: string;
};

const PROBLEM_BASE = 'urn:svc:streaming-app:problem:';

export function problemType(name: string): string {
  return PROBLEM_BASE + name;
}

export function sendProblem(req: IncomingMessage, res: ServerResponse, problem: Problem, headers: Record<string, string> = {}): void {
  const body = JSON.stringify({ ...problem, instance: (req.url ?? '/').split('?')[0] });
  res.writeHead(problem.status, {
    'content-type': 'application/problem+json',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    ...headers,
  });
  res.end(req.method === 'HEAD' ? undefined : body);
}

export function sendJson(req: IncomingMessage, res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store' });
  res.end(req.method === 'HEAD' ? undefined : body);
}

export function notFound(req: IncomingMessage, res: ServerResponse): void {
  sendProblem(req, res, { type: problemType('not-found'), title: 'Not Found', status: 404, detail: `no resource at ${(req.url ?? '/').split('?')[0]}` });
}

export function methodNotAllowed(req: IncomingMessage, res: ServerResponse, allow: string): void {
  sendProblem(req, res, {
    type: problemType('method-not-allowed'), title: 'Method Not Allowed', status: 405,
    detail: `${req.method} is not allowed here; use ${allow}`,
  }, { allow });
}
