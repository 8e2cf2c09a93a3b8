// One request in flight through the invocation plane, and the shapes that cross its parts.
import { Problem } from '../domain/problem.ts';
import type { Grant } from './slots.ts';
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

/**
 * One request and its life: queued → running → done, with a detour back to queued when its instance went
 * away before the request reached it. Each change is a method named for it; one the state does not allow
 * is refused (an Error: a caller out of step is a bug, not a case to handle).
 */
export class Invocation {
  readonly id: string;
  /** SVC-SUB: the owner of the credential that invoked. */
  readonly subject: string;
  readonly request: InvocationRequest;
  #target: Target;
  #state: InvocationState = 'queued';
  /** The slot it waits for while queued: granted once by the queue. */
  #slot = Promise.withResolvers<Grant>();
  /** The waiting synchronous client, until it is answered or gets its 202. */
  #sink: ClientSink | undefined;
  #pollTimer: NodeJS.Timeout | undefined;
  /** Answered 202, so kept in the store until its result is collected. */
  #durable = false;
  /** The 202's record being written: later writes of this request wait for it. */
  #stored: Promise<void> | undefined;
  /** Marked running in the store by this replica (durable requests only). */
  #claimed = false;
  #cancelled = false;
  /** Stops the exchange with the instance (a client that left, shutdown). */
  #abort: (() => void) | undefined;
  #result: StoredResult | undefined;
  #finishedAt: number | undefined;
  #progress: Progress | undefined;
  /** Pollers of a 202'd request waiting for its result. */
  #waiters: (() => void)[] = [];

  constructor(id: string, target: Target, subject: string, request: InvocationRequest, sink?: ClientSink) {
    this.id = id;
    this.#target = target;
    this.subject = subject;
    this.request = request;
    this.#sink = sink;
  }

  /** A request read back from the store (after a restart, or adopted): durable, and done with its result if it has one. */
  static fromStore(id: string, target: Target, subject: string, request: InvocationRequest, finished?: { result: StoredResult; at: number }): Invocation {
    const invocation = new Invocation(id, target, subject, request);
    invocation.#durable = true;
    if (finished) invocation.finish(finished.result, finished.at);
    return invocation;
  }

  get target(): Target {
    return this.#target;
  }

  get versionId(): string {
    return this.#target.versionId;
  }

  get state(): InvocationState {
    return this.#state;
  }

  get durable(): boolean {
    return this.#durable;
  }

  get stored(): Promise<void> | undefined {
    return this.#stored;
  }

  get claimed(): boolean {
    return this.#claimed;
  }

  get cancelled(): boolean {
    return this.#cancelled;
  }

  get result(): StoredResult | undefined {
    return this.#result;
  }

  /** When its result arrived (ms since epoch), for dropping results nobody collects. */
  get finishedAt(): number | undefined {
    return this.#finishedAt;
  }

  get progress(): Progress | undefined {
    return this.#progress;
  }

  /** Calls `passed` after `ms` unless the sink was taken by then (the client answered, or it left): its 202 is due. */
  startPollWindow(ms: number, passed: () => void) {
    if (this.#sink) this.#pollTimer = setTimeout(passed, ms);
  }

  /** Takes the waiting client (undefined when it was answered or left): whoever takes it answers it. */
  takeSink(): ClientSink | undefined {
    const sink = this.#sink;
    this.#sink = undefined;
    clearTimeout(this.#pollTimer);
    return sink;
  }

  /** Resolves with the slot the queue grants it (the one it waits for now, if it queued again). */
  granted(): Promise<Grant> {
    return this.#slot.promise;
  }

  /** The queue gives it a slot: it runs. */
  grant(grant: Grant) {
    this.#expect('queued', 'be granted a slot');
    this.#state = 'running';
    this.#slot.resolve(grant);
  }

  /** Its instance went away before the request reached it: it waits for a slot again. */
  requeue() {
    this.#expect('running', 'queue again');
    this.#state = 'queued';
    this.#slot = Promise.withResolvers<Grant>();
  }

  /** Its version stopped taking requests while it waited: it waits for `target`'s instead. */
  moveTo(target: Target) {
    this.#expect('queued', 'move to another version');
    this.#target = target;
  }

  /** Answered 202: kept in the store from now on (`stored` resolves once written). */
  persisted(stored: Promise<void>) {
    if (this.#durable || this.#state === 'done') throw new Error(`request ${this.id} is ${this.#durable ? 'stored already' : 'done'}; only a request in flight is stored`);
    this.#durable = true;
    this.#stored = stored;
  }

  /** Marked running in the store by this replica: no other replica runs it. */
  claim() {
    if (!this.#durable) throw new Error(`request ${this.id} is not stored; only a stored request is claimed`);
    this.#claimed = true;
  }

  /** The instance's progress report (SVC-PERCENT-COMPLETE and the partial response a 202 shows). */
  reportProgress(percent: number, partialResponse?: unknown) {
    this.#progress = { percent: Math.max(0, Math.min(100, Math.round(percent))), partialResponse };
  }

  /** What stops its exchange with the instance while one runs (undefined once it ended); a cancelled request is stopped at once. */
  whileSending(stop: (() => void) | undefined) {
    this.#abort = stop;
    if (stop && this.#cancelled) stop();
  }

  /** Its exchange with the instance must end (the client left, the result cannot be kept). */
  stopExchange() {
    this.#abort?.();
  }

  /** Its synchronous client left before its 202: the client is let go, a running exchange is stopped. */
  cancel() {
    if (this.#durable || this.#state === 'done') throw new Error(`request ${this.id} is ${this.#durable ? 'stored' : 'done'}; only a waiting client's request is cancelled`);
    this.#cancelled = true;
    this.takeSink();
    this.stopExchange();
  }

  /** The platform stops: its client and pollers are let go and its exchange is stopped. */
  shutDown() {
    this.#cancelled = true;
    this.takeSink();
    this.stopExchange();
    this.#wake();
  }

  /** It has its result (at `at`, ms since epoch): whoever polls for it is woken. */
  finish(result: StoredResult, at: number) {
    if (this.#state === 'done') throw new Error(`request ${this.id} is done already; it has one result`);
    this.#state = 'done';
    this.#result = result;
    this.#finishedAt = at;
    this.#wake();
  }

  /** Resolves once it has its result, or after `ms`. */
  untilResult(ms: number): Promise<void> {
    if (this.#result) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((waiter) => waiter !== wake);
        resolve();
      }, ms);
      this.#waiters.push(wake);
    });
  }

  #wake() {
    const waiters = this.#waiters;
    if (waiters.length === 0) return;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  #expect(state: InvocationState, to: string) {
    if (this.#state !== state) throw new Error(`request ${this.id} is ${this.#state}; only a ${state} request may ${to}`);
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
