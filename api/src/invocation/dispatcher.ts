// Carries a request that holds a slot to its instance: keep-alive connection pools per instance (undici),
// and one Exchange per request that streams the instance's response straight into its BodyWriter.
import { Pool } from 'undici';
import type { Dispatcher as UndiciDispatcher } from 'undici';
import type { ReadyInstance } from '../control/instances/service.ts';
import { containerHeaders } from './headers.ts';
import type { BodyWriter, Invocation } from './invocation.ts';
import { originOf } from './slots.ts';

/**
 * How an exchange ended. `unreachable`: the request never reached the instance (refused, unresolvable),
 * so it may safely wait for another; `broken`: it failed after reaching it, so it is not retried.
 */
export type ExchangeOutcome = 'done' | 'unreachable' | 'broken';

export interface ExchangeEvents {
  /** The response starts: the writer its body goes to. */
  started(status: number, headers: Record<string, string | string[] | undefined>): BodyWriter;
  finished(outcome: ExchangeOutcome, error?: Error): void;
}

/** Connect failures: the request never reached the instance. */
const NOT_STARTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'ENETUNREACH']);
/** A request may run for an hour (the longest poll window), plus a margin. */
const HARD_TIMEOUT_MS = 3_605_000;

/** One request to one instance, as an undici dispatch handler: no Readable, no AbortSignal, no promise. */
class Exchange implements UndiciDispatcher.DispatchHandler {
  readonly #invocation: Invocation;
  readonly #events: ExchangeEvents;
  #writer: BodyWriter | undefined;

  constructor(invocation: Invocation, events: ExchangeEvents) {
    this.#invocation = invocation;
    this.#events = events;
  }

  onRequestStart(controller: UndiciDispatcher.DispatchController) {
    if (this.#invocation.cancelled) controller.abort(new Error('the client left'));
    else this.#invocation.abort = () => controller.abort(new Error('the client left'));
  }

  onResponseStart(_controller: UndiciDispatcher.DispatchController, status: number, headers: Record<string, string | string[] | undefined>) {
    if (status >= 200) this.#writer = this.#events.started(status, headers);
  }

  onResponseData(controller: UndiciDispatcher.DispatchController, chunk: Buffer) {
    if (this.#writer && !this.#writer.data(chunk)) {
      controller.pause();
      this.#writer.onDrain(() => controller.resume());
    }
  }

  onResponseEnd() {
    this.#invocation.abort = undefined;
    this.#writer?.end();
    this.#events.finished('done');
  }

  onResponseError(_controller: UndiciDispatcher.DispatchController, error: Error) {
    this.#invocation.abort = undefined;
    if (this.#writer) {
      this.#writer.error();
      this.#events.finished('broken', error);
    } else {
      this.#events.finished(NOT_STARTED.has((error as { code?: string }).code ?? '') ? 'unreachable' : 'broken', error);
    }
  }
}

export class Dispatcher {
  readonly #pools = new Map<string, Pool>();
  /** Origins placement announces, per version; a pool lives while its origin is announced or busy. */
  readonly #announced = new Map<string, Set<string>>();
  /** How many versions announce each origin. */
  readonly #wanted = new Map<string, number>();
  readonly #busy = new Map<string, number>();
  readonly #maxResultBytes: number;

  constructor(options: { maxResultBytes: number }) {
    this.#maxResultBytes = options.maxResultBytes;
  }

  send(invocation: Invocation, instance: ReadyInstance, events: ExchangeEvents) {
    const origin = originOf(instance);
    this.#busy.set(origin, (this.#busy.get(origin) ?? 0) + 1);
    const exchange = new Exchange(invocation, {
      started: events.started,
      finished: (outcome, error) => {
        this.#idle(origin);
        events.finished(outcome, error);
      },
    });
    const { body, passThrough } = invocation.request;
    this.#pool(origin, instance).dispatch({
      path: passThrough?.path ?? invocation.target.inferenceUrl, method: passThrough?.method ?? 'POST', body,
      headers: containerHeaders(invocation, instance, this.#maxResultBytes),
    }, exchange);
  }

  /** Instances come and go (a streaming container lives one session); their pools go with them. */
  ready(versionId: string, instances: ReadyInstance[]) {
    const before = this.#announced.get(versionId) ?? new Set<string>();
    const now = new Set(instances.map(originOf));
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

  async close() {
    await Promise.all([...this.#pools.values()].map((pool) => pool.close().catch(() => {})));
    this.#pools.clear();
  }

  #pool(origin: string, instance: ReadyInstance): Pool {
    let pool = this.#pools.get(origin);
    if (!pool) {
      pool = new Pool(origin, {
        connections: Math.max(instance.maxRequestConcurrency, 1), pipelining: 1, headersTimeout: HARD_TIMEOUT_MS, bodyTimeout: HARD_TIMEOUT_MS,
      });
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
    void pool?.close().catch(() => {});
  }
}
