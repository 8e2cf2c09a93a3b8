// Errors leave the proxy as application/problem+json {type,title,status,detail,instance,requestId},
// the platform's own shape, so a browser client handles the proxy's errors and the platform's alike.
// `instance` is the path without its query string, which may hold a user token.
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { CORS_HEADERS } from './cors.ts';

export const problems = {
  'bad-request': 400,
  unauthorized: 401,
  forbidden: 403,
  'not-found': 404,
  'method-not-allowed': 405,
  'request-timeout': 408,
  internal: 500,
  'bad-gateway': 502,
  'gateway-timeout': 504,
} as const;

export type ProblemCode = keyof typeof problems;

export const PROBLEM_TYPE_PREFIX = 'urn:svc:problem-details:';
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance: string;
  requestId: string;
}

/** An expected failure, thrown by the request steps and rendered once by the server. */
export class Problem extends Error {
  readonly code: ProblemCode;
  readonly status: number;
  readonly headers: Record<string, string>;

  constructor(code: ProblemCode, detail: string, headers: Record<string, string> = {}) {
    super(detail);
    this.code = code;
    this.status = problems[code];
    this.headers = headers;
  }

  body(instance: string, requestId: string): ProblemBody {
    return {
      type: PROBLEM_TYPE_PREFIX + this.code,
      title: STATUS_CODES[this.status] ?? 'Error',
      status: this.status,
      detail: this.message,
      instance,
      requestId,
    };
  }
}

export function pathOf(url: string | undefined): string {
  const value = url ?? '/';
  const query = value.indexOf('?');
  return query === -1 ? value : value.slice(0, query);
}

function responseHeaders(problem: Problem, body: string, requestId: string): Record<string, string> {
  return {
    ...CORS_HEADERS,
    ...problem.headers,
    'content-type': PROBLEM_CONTENT_TYPE,
    'content-length': String(Buffer.byteLength(body)),
    'cache-control': 'no-store',
    'x-request-id': requestId,
  };
}

export function sendProblem(res: ServerResponse, problem: Problem, url: string | undefined, requestId: string): void {
  const body = JSON.stringify(problem.body(pathOf(url), requestId));
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(problem.status, responseHeaders(problem, body, requestId));
  res.end(res.req?.method === 'HEAD' ? undefined : body);
}

/**
 * Answers an upgrade request that will not be upgraded. Node hands upgrades over as a bare socket,
 * so the response is written as HTTP/1.1 text, then the socket is closed.
 */
export function sendProblemOnSocket(socket: Duplex, problem: Problem, url: string | undefined, requestId: string): void {
  if (socket.destroyed || !socket.writable) return;
  const body = JSON.stringify(problem.body(pathOf(url), requestId));
  const headers = { ...responseHeaders(problem, body, requestId), connection: 'close' };
  const head = [`HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status]}`, ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)];
  socket.end(`${head.join('\r\n')}\r\n\r\n${body}`);
}
