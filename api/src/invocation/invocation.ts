// One request in flight through the invocation plane, and the shapes that cross its parts.
import { Problem } from '../domain/problem.ts';
import type { Target } from './resolver.ts';

/** An instance's response headers, names lower-cased; a repeated header is an array. */
export type ResponseHeaders = Record<string, string | string[]>;

export interface StoredResult {
  status: number;
  headers: ResponseHeaders;
  body: Buffer;
}

export interface Progress {
  percent: number;
  partialResponse?: unknown;
}

/** Where a function's response goes while it streams: the waiting client, or a buffer for the store. */
export interface BodyWriter {
  /** False asks the instance to pause until `onDrain`. */
  data(chunk: Buffer): boolean;
  end(): void;
  /** The instance broke off mid-response. */
  error(): void;
  onDrain(resume: () => void): void;
}

/** The synchronous client's end, written by the HTTP layer (reply.ts); the plane never sees a socket. */
export interface ClientSink {
  /** The function's response starts; the returned writer takes its body. */
  start(invocation: Invocation, status: number, headers: ResponseHeaders): BodyWriter;
  /** The whole answer at once (a result finished before the client was told anything). */
  result(invocation: Invocation, result: StoredResult): void;
  /** Nothing started within the poll window: 202 with the progress so far. */
  pending(invocation: Invocation): void;
  /** The platform could not answer (the store refused the 202's record). */
  fail(error: unknown): void;
}

export type InvocationState = 'queued' | 'running' | 'done';

/**
 * A host-routed request (wire-reference 5, `<functionId>.invocation.<domain>`) reaches the container with
 * the client's own method and path (with its query), instead of POST to the function's inferenceUrl.
 */
export interface PassThrough {
  method: string;
  path: string;
}

/** What the client sent, as the container gets it (also stored with a 202). */
export interface InvocationRequest {
  headers: Record<string, string>;
  body: Buffer;
  sse: boolean;
  passThrough?: PassThrough;
  /** Input assets (SVC-INPUT-ASSET-REFERENCES), put in the instance's SVC-ASSET-DIR before the request reaches it. */
  assets?: string[];
}

/**
 * A container's error becomes problem+json (wire-reference 5) unless it is an event stream or a host-routed
 * request, which the reference passes through untouched.
 */
export function rewrapsErrors(request: Pick<InvocationRequest, 'sse' | 'passThrough'>): boolean {
  return !request.sse && !request.passThrough;
}

export class Invocation {
  readonly id: string;
  /** Changed only by moveTo, while the request waits. */
  target: Target;
  /** SVC-SUB: the owner of the credential that invoked. */
  readonly subject: string;
  readonly request: InvocationRequest;
  state: InvocationState = 'queued';
  /** Answered 202, so kept in the store until its result is collected. */
  durable = false;
  /** Marked running in the store by this replica (durable requests only). */
  claimed = false;
  /** The waiting synchronous client, until it is answered or gets its 202. */
  sink: ClientSink | undefined;
  result: StoredResult | undefined;
  progress: Progress | undefined;
  /** Pollers of a 202'd request waiting for its result. */
  waiters: (() => void)[] = [];
  cancelled = false;
  /** Stops the exchange with the instance (a client that left, shutdown). */
  abort: (() => void) | undefined;
  /** When its result arrived (ms since epoch), for dropping results nobody collects. */
  finishedAt: number | undefined;
  pollTimer: NodeJS.Timeout | undefined;
  /** The 202's record being written: later writes of this request wait for it. */
  stored: Promise<void> | undefined;

  constructor(id: string, target: Target, subject: string, request: InvocationRequest) {
    this.id = id;
    this.target = target;
    this.subject = subject;
    this.request = request;
  }

  get versionId(): string {
    return this.target.versionId;
  }

  /** Its version stopped taking requests while it waited: it waits for `target`'s instead. */
  moveTo(target: Target) {
    if (this.state !== 'queued') throw new Error(`request ${this.id} is ${this.state}; only a waiting request moves`);
    this.target = target;
  }

  /** Wakes whoever waits on this request (pollers, a poll window). */
  wake() {
    const waiters = this.waiters;
    if (waiters.length === 0) return;
    this.waiters = [];
    for (const wake of waiters) wake();
  }
}

/** A platform-made answer (the instance failed, the platform restarted) in the shape of a stored result. */
export function problemResult(status: number, code: 'bad-gateway' | 'internal', detail: string): StoredResult {
  return storedProblem(new Problem(code, detail), status);
}

/** A Problem as a stored result (with its headers, e.g. Retry-After). */
export function storedProblem(problem: Problem, status = problem.status): StoredResult {
  const body = problem.toBody('', '');
  return { status, headers: { 'content-type': 'application/problem+json', ...problem.headers }, body: Buffer.from(JSON.stringify(body)) };
}
