// One version's requests waiting on this API replica, in order, and the loop that takes slots for them
// from the slots every replica shares (leases.ts). A slot whose request is done serves the next request
// waiting here with no write, while this replica runs no more than its fair share of the version's slots;
// otherwise it goes back and the replicas whose requests wait take their share. So at capacity a request
// costs no NATS round trip, and the slots are shared in proportion to the requests waiting at each replica.
import type { ReadyInstance } from '../control/instances/service.ts';
import type { Logger } from '../logger.ts';
import type { Invocation } from './invocation.ts';
import type { Lease, SlotLeases } from './leases.ts';
import { Fifo } from './queue.ts';
import { grantOnce } from './slots.ts';

/** A slot take that failed (a NATS failover) is tried again after this long. */
const RETRY_MS = 250;

export interface VersionQueueContext {
  leases: SlotLeases;
  /** The version's instances that take requests from this replica now. */
  usable(versionId: string): ReadyInstance[];
  /** The instance failed a connection here: it gets nothing more until placement announces it again. */
  bench(instanceId: string): void;
  log: Logger;
}

export class VersionQueue {
  readonly versionId: string;
  readonly #context: VersionQueueContext;
  readonly #waiting = new Fifo<Invocation>();
  /** Requests here found no slot: the slots' records say how many wait, and the others give way. */
  #short = false;
  #pumping = false;
  #closed = false;

  constructor(versionId: string, context: VersionQueueContext) {
    this.versionId = versionId;
    this.#context = context;
  }

  get size(): number {
    return this.#waiting.size;
  }

  /** At the tail; with nothing waiting, on a spare slot at once (no write, no round trip). */
  push(invocation: Invocation) {
    const spare = this.#waiting.size === 0 && this.#context.leases.takeSpare(this.versionId, this.#context.usable(this.versionId));
    if (spare) return this.#run(invocation, spare);
    this.#waiting.push(invocation);
    this.#counted();
    void this.#pump();
  }

  /** At the head: it waited longer than those behind (its instance went away, or its version did). */
  unshift(invocation: Invocation) {
    this.#waiting.unshift(invocation);
    this.#counted();
    void this.#pump();
  }

  remove(requestId: string): boolean {
    const removed = this.#waiting.remove(requestId);
    if (removed) this.#counted();
    return removed;
  }

  position(requestId: string): number | undefined {
    return this.#waiting.position(requestId);
  }

  close() {
    this.#closed = true;
  }

  /** Takes slots for the waiting requests, in order, as long as some wait (one loop per version). */
  async #pump() {
    if (this.#pumping) return;
    this.#pumping = true;
    const { leases, log } = this.#context;
    const stopped = () => this.#closed || this.#waiting.size === 0;
    const full = () => {
      this.#short = true;
      this.#counted();
    };
    try {
      while (!stopped()) {
        try {
          const taken = await leases.acquireMany(this.versionId, this.#waiting.size, () => this.#context.usable(this.versionId), stopped, full);
          for (const lease of taken ?? []) this.#runNext(lease);
        } catch (error) {
          if (this.#closed) break;
          log.warn({ err: error, versionId: this.versionId }, 'could not take slots for waiting requests; trying again');
          await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
        }
      }
    } finally {
      this.#pumping = false;
    }
  }

  /**
   * Once requests here found no slot, the slots' records say how many wait (the others' shares follow
   * it), until none does. A request that only waits for its slot's write is not counted.
   */
  #counted() {
    if (!this.#waiting.size) this.#short = false;
    if (!this.#closed) this.#context.leases.wait(this.versionId, this.#short ? this.#waiting.size : 0);
  }

  /** The next waiting request runs with `lease`; with none waiting the slot goes back. */
  #runNext(lease: Lease) {
    const next = this.#waiting.shift();
    if (!next) return this.#giveBack(lease);
    this.#counted();
    this.#run(next, lease);
  }

  #run(invocation: Invocation, lease: Lease) {
    invocation.grant(grantOnce(lease.instance, (outcome) => this.#done(lease, outcome)));
  }

  /** A request is done with its slot: the next one here takes it if this replica keeps it, else it goes back. */
  #done(lease: Lease, outcome: 'done' | 'failed') {
    const { leases, usable, bench } = this.#context;
    if (outcome === 'failed') bench(lease.instance.instanceId);
    const instances = usable(this.versionId);
    const keep = outcome === 'done' && this.#waiting.size > 0 && !this.#closed
      && instances.some((instance) => instance.instanceId === lease.instance.instanceId) && leases.keeps(this.versionId, instances);
    if (!keep) return this.#giveBack(lease);
    this.#runNext(lease);
  }

  #giveBack(lease: Lease) {
    void this.#context.leases.release(lease).catch((error) => this.#context.log.warn({ err: error }, 'could not release a slot lease; it expires'));
  }
}
