// Anything thrown while serving a request, as the problem+json the caller gets: catalogue problems as
// they are, known body-parser failures mapped, anything else logged and hidden behind a 500.
import type { ServerResponse } from 'node:http';
import type { Logger } from '../logger.ts';
import { Problem, PROBLEM_CONTENT_TYPE } from '../domain/problem.ts';

/** Maps anything thrown to a catalogue problem; unexpected errors are logged and hidden. */
export function asProblem(error: unknown, log: Logger, requestId: string): Problem {
  if (error instanceof Problem) return error;
  const { status, type, expose } = error as { status?: number; type?: string; expose?: boolean };
  if (type === 'entity.parse.failed') return new Problem('bad-request', 'Request body is not valid JSON');
  if (type === 'entity.too.large') return new Problem('payload-too-large', 'Request body is too large');
  if (type === 'encoding.unsupported' || type === 'charset.unsupported') {
    return new Problem('unsupported-media-type', 'Request body encoding is not supported');
  }
  // Express's own request errors say they may be shown (`expose`); another library's error that has a
  // status (a NATS time-out is a 408) is not the caller's fault.
  if (expose && status && status >= 400 && status < 500) return new Problem('bad-request', 'Malformed request');
  log.error({ reqId: requestId, err: error }, 'unhandled error');
  return new Problem('internal', 'The server could not complete the request; quote the request id when reporting it');
}

/** Writes `problem` (or drops the connection when the response had already started). */
export function writeProblem(res: ServerResponse, problem: Problem, instance: string, requestId: string) {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify(problem.toBody(instance.split('?')[0], requestId));
  res.writeHead(problem.status, {
    ...problem.headers, 'content-type': `${PROBLEM_CONTENT_TYPE}; charset=utf-8`, 'content-length': String(Buffer.byteLength(body)),
    'x-request-id': requestId,
  });
  res.end(body);
}
