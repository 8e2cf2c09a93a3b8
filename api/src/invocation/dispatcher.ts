// Carries a request that holds a slot to its instance: keep-alive connection pools per instance
// (upstream.ts), and one Exchange per request that streams the instance's response straight into its
// BodyWriter. With several replicas (`keeper` given), a request goes through the result keeper of the
// instance's node instead (compute/keeper.ts), which finishes a 202'd request whose replica went away.
import type { ReadyInstance } from '../control/instances/service.ts';
import { KEEPER_HEADERS } from '../compute/keeper.ts';
import { containerHeaders } from './headers.ts';
import type { BodyWriter, Invocation, ResponseHeaders } from './invocation.ts';
import { originOf } from './slots.ts';
import { UpstreamPool, type ExchangeControl, type ResponseHandler } from './upstream.ts';

/**
 * How an exchange ended. `unreachable`: the request never reached the instance (refused, unresolvable),
 * so it may safely wait for another; `broken`: it failed after reaching it, so it is not retried.
 */
export type ExchangeOutcome = 'done' | 'unreachable' | 'broken';

export interface ExchangeEvents {
  /** The response starts: the writer its body goes to. */
  started(status: number, headers: ResponseHeaders): BodyWriter;
  finished(outcome: ExchangeOutcome, error?: Error): void;
}

/** Connect failures: the request never reached the instance. */
const NOT_STARTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ECONNECTTIMEOUT', 'ENETUNREACH']);
/** A request may run for an hour (the longest poll window), plus a margin, without a byte from its instance. */
const HARD_TIMEOUT_MS = 3_605_000;

/** One request to one instance: the response's events go to its writer, then the outcome to `events`. */
class Exchange implements ResponseHandler {
  readonly #events: ExchangeEvents;
  readonly #viaKeeper: boolean;
  #writer: BodyWriter | undefined;
  /** Ended or failed: nothing more reaches the writer (an abort can come mid-read). */
  #over = false;
  /** Set once dispatched: resumes a paused connection. */
  control: ExchangeControl | undefined;

  constructor(events: ExchangeEvents, viaKeeper: boolean) {
    this.#events = events;
    this.#viaKeeper = viaKeeper;
  }

  head(status: number, headers: ResponseHeaders) {
    if (this.#viaKeeper && headers[KEEPER_HEADERS.unreachable]) return this.error(Object.assign(new Error('the keeper could not reach the instance'), { code: 'ECONNREFUSED' }));
    this.#writer = this.#events.started(status, headers);
  }

  data(chunk: Buffer): boolean {
    if (this.#over || this.#writer!.data(chunk)) return true;
    this.#writer!.onDrain(() => this.control?.resume());
    return false;
  }

  end() {
    if (this.#over) return;
    this.#over = true;
    this.#writer!.end();
    this.#events.finished('done');
  }

  error(error: Error & { code?: string }) {
    if (this.#over) return;
    this.#over = true;
    if (this.#writer) {
      this.#writer.error();
      this.#events.finished('broken', error);
    } else {
      this.#events.finished(NOT_STARTED.has(error.code ?? '') ? 'unreachable' : 'broken', error);
    }
  }
}

/** What a replica sends a node's result keeper with each request (kept-answers.ts). */
export interface KeeperTokens {
  token(nodeId: string, instanceId: string, requestId: string): string;
}

export class Dispatcher {
  readonly #pools = new Map<string, UpstreamPool>();
  /** Origins placement announces, per version; a pool lives while its origin is announced or busy. */
  readonly #announced = new Map<string, Set<string>>();
  /** How many versions announce each origin. */
  readonly #wanted = new Map<string, number>();
  readonly #busy = new Map<string, number>();
  readonly #maxResultBytes: number;
  readonly #keeper: KeeperTokens | undefined;
  /** The keeper of this process's own agent, if it runs one. */
  #ownKeeper: string | undefined;

  constructor(options: { maxResultBytes: number; keeper?: KeeperTokens }) {
    this.#maxResultBytes = options.maxResultBytes;
    this.#keeper = options.keeper;
  }

  send(invocation: Invocation, instance: ReadyInstance, events: ExchangeEvents) {
    const keeper = this.#keeperOf(instance);
    const origin = keeper ?? originOf(instance);
    this.#busy.set(origin, (this.#busy.get(origin) ?? 0) + 1);
    const exchange = new Exchange({
      started: events.started,
      finished: (outcome, error) => {
        invocation.whileSending(undefined);
        this.#idle(origin);
        events.finished(outcome, error);
      },
    }, keeper !== undefined);
    const { body, passThrough } = invocation.request;
    let headerLines = containerHeaders(invocation, instance, this.#maxResultBytes);
    if (keeper) {
      const token = this.#keeper!.token(instance.nodeId!, instance.instanceId, invocation.id);
      headerLines += `${KEEPER_HEADERS.instance}: ${instance.instanceId}\r\n${KEEPER_HEADERS.token}: ${token}\r\n`;
    }
    const control = this.#pool(origin).dispatch({
      method: passThrough?.method ?? 'POST', path: passThrough?.path ?? invocation.target.inferenceUrl, body, headerLines,
    }, exchange);
    exchange.control = control;
    invocation.whileSending(() => control.abort(new Error('the client left')));
  }

  /** Instances come and go (a streaming container lives one session); their pools go with them. */
  ready(versionId: string, instances: ReadyInstance[]) {
    const before = this.#announced.get(versionId) ?? new Set<string>();
    const now = new Set(instances.map((instance) => this.#keeperOf(instance) ?? originOf(instance)));
    if (now.size) this.#announced.set(versionId, now);
    else this.#announced.delete(versionId);
    for (const origin of now) if (!before.has(origin)) this.#wanted.set(origin, (this.#wanted.get(origin) ?? 0) + 1);
    for (const origin of before) {
      if (now.has(origin)) continue;
      const left = (this.#wanted.get(origin) ?? 1) - 1;
      if (left > 0) this.#wanted.set(origin, left);
      else this.#wanted.delete(origin);
      this.#idle(origin, 0);
    }
  }

  close() {
    for (const pool of this.#pools.values()) pool.close();
    this.#pools.clear();
  }

  /**
   * This process runs an agent whose keeper is at `origin`: requests to that agent's instances go to them
   * directly, since this process's death ends them too (there would be no answer to keep). Said before the
   * agent links, so before any of its instances is announced.
   */
  keeperInProcess(origin: string) {
    this.#ownKeeper = origin;
  }

  /** The keeper a request to `instance` goes through, when this replica uses keepers and its node has one of another process. */
  #keeperOf(instance: ReadyInstance): string | undefined {
    const keeper = this.#keeper && instance.nodeId ? instance.endpoint.keeper : undefined;
    return keeper === this.#ownKeeper ? undefined : keeper;
  }

  #pool(origin: string): UpstreamPool {
    let pool = this.#pools.get(origin);
    if (!pool) {
      pool = new UpstreamPool(origin, HARD_TIMEOUT_MS);
      this.#pools.set(origin, pool);
    }
    return pool;
  }

  /** One exchange fewer on `origin`; its pool closes once nothing announces or uses it. */
  #idle(origin: string, finished = 1) {
    const busy = (this.#busy.get(origin) ?? 0) - finished;
    if (busy > 0) {
      this.#busy.set(origin, busy);
      return;
    }
    this.#busy.delete(origin);
    if (this.#wanted.has(origin)) return;
    const pool = this.#pools.get(origin);
    this.#pools.delete(origin);
    pool?.close();
  }
}
