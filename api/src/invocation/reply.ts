// The HTTP side of an invocation: writes what the plane hands a waiting client (the function's response
// as it streams, a finished result, a 202) and what a status poll returns, in the reference's shapes.
import { STATUS_CODES, type ServerResponse } from 'node:http';
import { z } from 'zod';
import { PROBLEM_CONTENT_TYPE } from '../domain/problem.ts';
import { asProblem, writeProblem } from '../http/problem-response.ts';
import { absoluteUrl } from '../http/host.ts';
import { isLargeResultPath } from './large-results.ts';
import type { Logger } from '../logger.ts';
import { forwardedResponseHeaders, svcStatus } from './headers.ts';
import { rewrapsErrors, type BodyWriter, type ClientSink, type Invocation, type Progress, type ResponseHeaders, type StoredResult } from './invocation.ts';

const EXPOSED = 'svc-reqid, svc-status, svc-percent-complete';
/** Bodies up to this size are read whole and sent in one write; larger ones and SSE stream through. */
const BUFFERED_BYTES = 64 * 1024;

/**
 * Whom an answer is for: the invocation (SVC-REQID) and the HTTP request carrying it (x-request-id; the
 * same id on pexec, the poll's own on a status poll).
 */
interface Addressee {
  id: string;
  requestId: string;
}

/**
 * Adds the platform's headers of an answer to `headers`. x-request-id is written here, not set ahead by
 * the lean server: a response without setHeader takes Node's cheaper writeHead.
 */
function withInvocationHeaders<H extends Record<string, string | string[]>>(headers: H, to: Addressee, status: number): H {
  return Object.assign(headers, { 'x-request-id': to.requestId, 'svc-reqid': to.id, 'svc-status': svcStatus(status), 'access-control-expose-headers': EXPOSED });
}

function kebab(status: number): string {
  return (STATUS_CODES[status] ?? 'error').toLowerCase().replace(/[^a-z0-9]+/g, '-');
}

/** What a container's error body may say (Triton's shape): `{"error": "..."}`. */
const containerError = z.object({ error: z.string() });

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
}

/** A container's 4xx/5xx as problem+json (wire-reference 5): detail from its JSON `error`, else "Inference error". */
function containerProblem(status: number, body: Buffer, instance: string, requestId: string): string {
  const detail = containerError.safeParse(parseJson(body)).data?.error || 'Inference error';
  return JSON.stringify({ type: `urn:inference-service:problem-details:${kebab(status)}`, title: STATUS_CODES[status] ?? 'Error', status, detail, instance, requestId });
}

/** A whole answer in one write; a container's error rewrapped as problem+json when `rewrap` (rewrapsErrors). */
export function sendResult(res: ServerResponse, to: Addressee & { rewrap: boolean }, result: StoredResult, instance: string) {
  if (result.status >= 400 && to.rewrap && !String(result.headers['content-type'] ?? '').startsWith(PROBLEM_CONTENT_TYPE)) {
    res.writeHead(result.status, withInvocationHeaders({ 'content-type': `${PROBLEM_CONTENT_TYPE}; charset=utf-8` }, to, result.status));
    res.end(containerProblem(result.status, result.body, instance, to.id));
    return;
  }
  const forwarded = forwardedResponseHeaders(result.headers);
  // A large result's Location is the platform's own signed path: made absolute, on the host the client reached.
  if (result.status === 302 && isLargeResultPath(forwarded.location)) forwarded.location = absoluteUrl(res.req, forwarded.location);
  forwarded['content-length'] = String(result.body.length);
  res.writeHead(result.status, withInvocationHeaders(forwarded, to, result.status));
  res.end(result.body);
}

/** 202: SVC-REQID, the progress so far and the partial response as the body. */
export function sendPending(res: ServerResponse, invocation: { id: string; progress?: Progress }, requestId: string) {
  const headers: Record<string, string> = withInvocationHeaders({}, { id: invocation.id, requestId }, 202);
  const progress = invocation.progress;
  if (progress) headers['svc-percent-complete'] = String(progress.percent);
  if (progress?.partialResponse !== undefined) {
    res.writeHead(202, { ...headers, 'content-type': 'application/json' });
    res.end(JSON.stringify(progress.partialResponse));
  } else {
    res.writeHead(202, headers);
    res.end();
  }
}

/**
 * The function's response to the waiting client. Event streams and large bodies stream as produced;
 * small bodies (and errors, which are rewrapped) are held and sent in one write.
 */
class ResponseWriter implements BodyWriter {
  readonly #reply: ClientReply;
  readonly #to: Addressee & { rewrap: boolean };
  readonly #status: number;
  readonly #headers: ResponseHeaders;
  #chunks: Buffer[] = [];
  #size = 0;
  #streaming = false;

  constructor(reply: ClientReply, invocation: Invocation, status: number, headers: ResponseHeaders) {
    this.#reply = reply;
    this.#to = { id: invocation.id, requestId: reply.requestId, rewrap: status >= 400 && rewrapsErrors(invocation.request) };
    this.#status = status;
    this.#headers = headers;
    // Event streams must reach the client as produced: the headers go out before the first event.
    if (invocation.request.sse) this.#stream();
  }

  data(chunk: Buffer): boolean {
    if (this.#streaming) return this.#reply.res.write(chunk);
    this.#chunks.push(chunk);
    this.#size += chunk.length;
    if (this.#to.rewrap || this.#size <= BUFFERED_BYTES) return true;
    this.#stream();
    let flowing = true;
    for (const held of this.#chunks.splice(0)) flowing = this.#reply.res.write(held);
    return flowing;
  }

  end() {
    if (this.#streaming) {
      this.#reply.res.end();
    } else {
      const body = this.#chunks.length === 1 ? this.#chunks[0] : Buffer.concat(this.#chunks);
      sendResult(this.#reply.res, this.#to, { status: this.#status, headers: this.#headers, body }, this.#reply.instance);
    }
    this.#reply.answered(this.#status);
  }

  error() {
    this.#reply.res.destroy();
  }

  onDrain(resume: () => void) {
    this.#reply.res.once('drain', resume);
  }

  #stream() {
    this.#streaming = true;
    this.#reply.res.writeHead(this.#status, withInvocationHeaders(forwardedResponseHeaders(this.#headers), this.#to, this.#status));
    this.#reply.res.flushHeaders();
  }
}

/**
 * The waiting client of one pexec call. `instance` is the request path, for problem bodies; `answered` is
 * told the status once the whole answer is written (the invocation metrics).
 */
export class ClientReply implements ClientSink {
  readonly res: ServerResponse;
  readonly instance: string;
  /** The HTTP request's id, which is also the invocation's. */
  readonly requestId: string;
  readonly answered: (status: number) => void;
  readonly #log: Logger;

  constructor(res: ServerResponse, instance: string, requestId: string, log: Logger, answered: (status: number) => void) {
    this.res = res;
    this.instance = instance;
    this.requestId = requestId;
    this.#log = log;
    this.answered = answered;
  }

  start(invocation: Invocation, status: number, headers: ResponseHeaders): BodyWriter {
    return new ResponseWriter(this, invocation, status, headers);
  }

  result(invocation: Invocation, result: StoredResult) {
    sendResult(this.res, { id: invocation.id, requestId: this.requestId, rewrap: rewrapsErrors(invocation.request) }, result, this.instance);
    this.answered(result.status);
  }

  pending(invocation: Invocation) {
    sendPending(this.res, invocation, this.requestId);
    this.answered(202);
  }

  fail(error: unknown) {
    writeProblem(this.res, asProblem(error, this.#log, this.requestId), this.instance, this.requestId);
  }
}
