// Per-instance slots: each ready instance takes at most maxRequestConcurrency requests at once, the next
// request goes to the least loaded instance with room, and a request holds its slot as a Grant until released.
import type { ReadyInstance } from '../control/instances/service.ts';

/** A slot on one instance, held by one request until released. */
export interface Grant {
  instance: ReadyInstance;
  /**
   * Hands the slot back. `failed`: the connection to the instance failed, so it gets nothing more until
   * placement announces it again (a dying process must not take the requests queued behind).
   */
  release(outcome: 'done' | 'failed'): void;
}

/** A grant whose `release` acts once, however often it is called. */
export function grantOnce(instance: ReadyInstance, release: (outcome: 'done' | 'failed') => void): Grant {
  let released = false;
  return {
    instance,
    release(outcome) {
      if (released) return;
      released = true;
      release(outcome);
    },
  };
}

export interface Slot {
  ready: ReadyInstance;
  inflight: number;
}

/** The least loaded slot with room, or undefined when every one is full. */
export function leastLoaded<S extends Slot>(slots: readonly S[]): S | undefined {
  let best: S | undefined;
  for (const slot of slots) {
    if (slot.inflight < slot.ready.maxRequestConcurrency && (!best || slot.inflight < best.inflight)) best = slot;
  }
  return best;
}

export class Slots {
  #byVersion = new Map<string, Slot[]>();
  /** Taken out after a failed connection, kept (with their in-flight counts) until placement announces them again. */
  #benched = new Map<string, Slot>();

  /** The slot the next request of the version takes, or undefined when none has room. */
  free(versionId: string): Slot | undefined {
    const slots = this.#byVersion.get(versionId);
    return slots ? leastLoaded(slots) : undefined;
  }

  take(slot: Slot) {
    slot.inflight++;
  }

  release(slot: Slot) {
    slot.inflight--;
  }

  /** The instance failed a connection: it gets nothing more until placement announces it again. */
  bench(slot: Slot) {
    const { versionId, instanceId } = slot.ready;
    const remaining = (this.#byVersion.get(versionId) ?? []).filter((candidate) => candidate !== slot);
    if (remaining.length) this.#byVersion.set(versionId, remaining);
    else this.#byVersion.delete(versionId);
    this.#benched.set(instanceId, slot);
  }

  /** Placement's current set for a version: known slots keep their counts; the benched come back. */
  ready(versionId: string, instances: ReadyInstance[]) {
    const previous = new Map((this.#byVersion.get(versionId) ?? []).map((slot) => [slot.ready.instanceId, slot]));
    const next = instances.map((instance) => {
      const slot = previous.get(instance.instanceId) ?? this.#benched.get(instance.instanceId) ?? { ready: instance, inflight: 0 };
      this.#benched.delete(instance.instanceId);
      slot.ready = instance;
      return slot;
    });
    if (next.length) this.#byVersion.set(versionId, next);
    else this.#byVersion.delete(versionId);
    for (const [instanceId, slot] of this.#benched) {
      if (slot.ready.versionId === versionId && slot.inflight === 0) this.#benched.delete(instanceId);
    }
  }
}

export function originOf(instance: ReadyInstance): string {
  return `http://${instance.endpoint.host}:${instance.endpoint.ports.inference}`;
}
