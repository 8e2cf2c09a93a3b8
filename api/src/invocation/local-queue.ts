// The embedded InvocationQueue: FIFO per function version and per-instance slots, in this process. One
// API replica only: a second replica would keep its own queue and fill the same instances again.
import type { ReadyInstance } from '../control/instances/service.ts';
import { Problem } from '../domain/problem.ts';
import type { Invocation } from './invocation.ts';
import { Fifo, type InvocationQueue } from './queue.ts';
import { grantOnce, Slots, type Grant, type Slot } from './slots.ts';

export class LocalQueue implements InvocationQueue {
  readonly #waiting = new Map<string, Fifo<Invocation>>();
  readonly #slots = new Slots();
  readonly #maxDepth: number;
  #seen: (versionId: string, instances: ReadyInstance[]) => void = () => {};

  constructor(options: { maxDepth: number }) {
    this.#maxDepth = options.maxDepth;
  }

  onInstances(seen: (versionId: string, instances: ReadyInstance[]) => void) {
    this.#seen = seen;
  }

  enqueue(invocation: Invocation) {
    const fifo = this.#fifo(invocation.versionId);
    if (fifo.size >= this.#maxDepth) {
      throw new Problem('too-many-requests', `The queue of function version '${invocation.versionId}' is full (${this.#maxDepth} waiting)`, {
        headers: { 'retry-after': '1' },
      });
    }
    fifo.push(invocation);
    this.#pump(invocation.versionId);
  }

  requeue(invocation: Invocation) {
    this.#fifo(invocation.versionId).unshift(invocation);
    this.#pump(invocation.versionId);
  }

  remove(invocation: Invocation): boolean {
    return this.#waiting.get(invocation.versionId)?.remove(invocation.id) ?? false;
  }

  position(invocation: Invocation): number | undefined {
    return this.#waiting.get(invocation.versionId)?.position(invocation.id);
  }

  depth(versionId: string): number {
    return this.#waiting.get(versionId)?.size ?? 0;
  }

  ready(versionId: string, instances: ReadyInstance[]) {
    this.#slots.ready(versionId, instances);
    this.#seen(versionId, instances);
    this.#pump(versionId);
  }

  async close() {}

  #fifo(versionId: string): Fifo<Invocation> {
    let fifo = this.#waiting.get(versionId);
    if (!fifo) this.#waiting.set(versionId, fifo = new Fifo());
    return fifo;
  }

  /** Hands waiting requests to instances with room, least loaded first. */
  #pump(versionId: string) {
    const fifo = this.#waiting.get(versionId);
    while (fifo && fifo.size > 0) {
      const slot = this.#slots.free(versionId);
      if (!slot) return;
      const invocation = fifo.shift()!;
      this.#slots.take(slot);
      invocation.grant(this.#grant(slot));
    }
  }

  #grant(slot: Slot): Grant {
    return grantOnce(slot.ready, (outcome) => {
      this.#slots.release(slot);
      if (outcome === 'failed') this.#slots.bench(slot);
      this.#pump(slot.ready.versionId);
    });
  }
}
