// Refusing a WebSocket upgrade before it happens, or a request Node's HTTP parser refused: an HTTP response
// written straight onto the socket, in the same problem+json shape as every other error.
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { PROBLEM_CONTENT_TYPE, type Problem } from '../domain/problem.ts';

export function rejectUpgrade(req: IncomingMessage, socket: Duplex, problem: Problem, extraHeaders: Record<string, string> = {}) {
  writeSocketProblem(socket, problem, (req.url ?? '/').split('?')[0], extraHeaders);
}

/** Answers `problem` straight onto a socket and closes it: an upgrade refused, a request Node's parser refused. */
export function writeSocketProblem(socket: Duplex, problem: Problem, instance: string, extraHeaders: Record<string, string> = {}) {
  const requestId = randomUUID();
  const body = JSON.stringify(problem.toBody(instance, requestId));
  const headers = {
    'content-type': `${PROBLEM_CONTENT_TYPE}; charset=utf-8`,
    'content-length': String(Buffer.byteLength(body)),
    'x-request-id': requestId,
    connection: 'close',
    ...problem.headers,
    ...extraHeaders,
  };
  const head = [`HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status]}`, ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)];
  socket.end(`${head.join('\r\n')}\r\n\r\n${body}`);
}
