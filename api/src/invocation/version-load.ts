// The invocation plane's load per version: requests running, the latest request of every version invoked
// since start (the load metrics, and through them the autoscaler, read these), and placement's demand
// (waiting + running: a version with work never scales below one instance).
import type { FunctionLoad } from '../domain/load.ts';
import type { Target } from './resolver.ts';

/** Demand is reported when a version gains or loses all its work, else at most this often. */
const DEMAND_REPORT_MS = 250;

export interface VersionLoadOptions {
  /** Requests of the version waiting in the queue. */
  depth(versionId: string): number;
  demand: { setDemand(versionId: string, count: number): void };
  /** Ms since epoch of a request (the injected clock when tests move time). */
  clock(): number;
}

export class VersionLoad {
  readonly #options: VersionLoadOptions;
  readonly #running = new Map<string, number>();
  readonly #invoked = new Map<string, { target: Target; lastRequestAt?: number }>();
  readonly #reported = new Map<string, { count: number; at: number }>();
  /** Versions whose report waits for the microtask (report). */
  readonly #due = new Set<string>();

  constructor(options: VersionLoadOptions) {
    this.#options = options;
  }

  /** A request for `target` arrived now. */
  requested(target: Target) {
    const at = this.#options.clock();
    const seen = this.#invoked.get(target.versionId);
    if (seen) seen.lastRequestAt = at;
    else this.#invoked.set(target.versionId, { target, lastRequestAt: at });
  }

  /** A stored request queues again (after a restart): its version is counted without a request time. */
  recovered(target: Target) {
    if (!this.#invoked.has(target.versionId)) this.#invoked.set(target.versionId, { target });
  }

  started(versionId: string) {
    this.#running.set(versionId, (this.#running.get(versionId) ?? 0) + 1);
  }

  ended(versionId: string) {
    this.#running.set(versionId, (this.#running.get(versionId) ?? 0) - 1);
  }

  /**
   * Tells placement the version's demand when it gained or lost all its work, else at most every
   * DEMAND_REPORT_MS. Counted a microtask later: a slot handed on by the request that just ended is granted
   * now but counted running by its runner only then (service.ts #serve), and in between the version would
   * read as having no work (a graceful drain would stop its instance under it).
   */
  report(versionId: string) {
    if (this.#due.has(versionId)) return;
    this.#due.add(versionId);
    queueMicrotask(() => {
      this.#due.delete(versionId);
      this.#reportNow(versionId);
    });
  }

  #reportNow(versionId: string) {
    const count = this.#options.depth(versionId) + (this.#running.get(versionId) ?? 0);
    const last = this.#reported.get(versionId);
    const at = Date.now();
    if (last && (last.count === 0) === (count === 0) && at - last.at < DEMAND_REPORT_MS) return;
    this.#reported.set(versionId, { count, at });
    this.#options.demand.setDemand(versionId, count);
  }

  /** Queue depth, requests running and the latest request of every version invoked since start. */
  *load(): Iterable<FunctionLoad> {
    for (const [versionId, { target, lastRequestAt }] of this.#invoked) {
      yield {
        ncaId: target.ncaId, functionId: target.functionId, versionId, queued: this.#options.depth(versionId),
        inflight: this.#running.get(versionId) ?? 0, lastRequestAt,
      };
    }
  }
}
