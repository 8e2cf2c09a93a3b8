// Instance slots shared by API replicas: one NATS KV entry per function version holds every lease on its
// instances ({leaseId: {instanceId, replica, until}}), changed only by compare-and-set on the entry's
// revision, so two replicas never take the same last slot. A replica renews its leases while their
// requests run; a killed replica's leases expire after LEASE_MS and their slots come back.
// Entries are cached from the bucket's watch, and a replica's changes to one version wait for its write
// in flight and then go together in the next one: one round trip per batch, not per request.
import { randomUUID } from 'node:crypto';
import type { KV, KvEntry } from '@nats-io/kv';
import { z } from 'zod';
import type { ReadyInstance } from '../control/instances/service.ts';
import { leastLoaded } from './slots.ts';

export const LEASE_MS = 15_000;
const RENEW_MS = LEASE_MS / 3;

const leasesSchema = z.record(z.string(), z.object({ instanceId: z.string(), replica: z.string(), until: z.number() }));
type Leases = z.infer<typeof leasesSchema>;

export interface Lease {
  id: string;
  versionId: string;
  instance: ReadyInstance;
}

/** A change to a version's leases, applied in a batch; `done` gets its outcome once the batch is written. */
interface Change {
  apply(leases: Leases): unknown;
  done(outcome: unknown, error?: unknown): void;
}

export class SlotLeases {
  readonly #kv: KV;
  readonly #replica: string;
  /** My leases still held, per version (renewed every RENEW_MS). */
  readonly #mine = new Map<string, Set<string>>();
  /** Wakes acquirers of a version when its entry changes. */
  readonly #changed = new Map<string, Set<() => void>>();
  /** The latest entry per version seen (watch or own writes): its leases and revision. */
  readonly #entries = new Map<string, { leases: Leases; revision: number }>();
  /** Changes waiting for the version's write in flight. */
  readonly #pending = new Map<string, Change[]>();
  readonly #writing = new Set<string>();
  readonly #renewer: NodeJS.Timeout;

  constructor(kv: KV, replica: string) {
    this.#kv = kv;
    this.#replica = replica;
    this.#renewer = setInterval(() => {
      for (const [versionId, held] of this.#mine) if (held.size) void this.#change(versionId, (leases) => this.#renew(leases, held)).catch(() => {});
    }, RENEW_MS);
    this.#renewer.unref();
  }

  /**
   * A slot on the least loaded instance with room among `instances()`, waiting while all are full.
   * Undefined once `stopped()` says so.
   */
  async acquire(versionId: string, instances: () => ReadyInstance[], stopped: () => boolean): Promise<Lease | undefined> {
    return (await this.acquireMany(versionId, 1, instances, stopped))?.[0];
  }

  /** Up to `count` slots in one write (at least one, waiting while all are full); undefined once stopped. */
  async acquireMany(versionId: string, count: number, instances: () => ReadyInstance[], stopped: () => boolean): Promise<Lease[] | undefined> {
    while (!stopped()) {
      const taken = await this.#takeNow(versionId, count, instances);
      if (taken.length) return taken;
      await this.#nextChange(versionId, 1000);
    }
    return undefined;
  }

  /** A slot if an instance has room now; undefined without waiting. */
  async tryAcquire(versionId: string, instances: () => ReadyInstance[]): Promise<Lease | undefined> {
    return (await this.#takeNow(versionId, 1, instances))[0];
  }

  /** A lease taken for a request that runs here (granted by the head's replica): renewed here from now on. */
  hold(lease: Lease) {
    this.#held(lease.versionId).add(lease.id);
  }

  /** A lease handed to the replica whose request it serves: renewed there, and expiring if that one dies. */
  handOver(lease: Lease) {
    this.#held(lease.versionId).delete(lease.id);
  }

  async release(lease: Lease) {
    this.#held(lease.versionId).delete(lease.id);
    await this.#change(lease.versionId, (leases) => delete leases[lease.id]);
  }

  /** The entry of a version changed (the bucket's watch): cached, and whoever waits for a slot looks again. */
  changed(versionId: string, entry?: KvEntry) {
    // Most entries are this replica's own writes, already cached: decoded only when newer.
    const known = this.#entries.get(versionId)?.revision ?? -1;
    if (entry && entry.revision > known) this.#remember(versionId, entry.operation === 'PUT' ? leasesSchema.parse(entry.json()) : {}, entry.revision);
    const waiters = this.#changed.get(versionId);
    this.#changed.delete(versionId);
    for (const wake of waiters ?? []) wake();
  }

  close() {
    clearInterval(this.#renewer);
    for (const versionId of [...this.#changed.keys()]) this.changed(versionId);
  }

  /** Up to `count` leases on the least loaded instances with room, written into `leases`. */
  #takeMany(versionId: string, leases: Leases, instances: ReadyInstance[], count: number): Lease[] {
    const slots = instances.map((ready) => ({ ready, inflight: 0 }));
    const byInstance = new Map(slots.map((slot) => [slot.ready.instanceId, slot]));
    for (const lease of Object.values(leases)) {
      const slot = byInstance.get(lease.instanceId);
      if (slot) slot.inflight++;
    }
    const taken: Lease[] = [];
    for (let free = leastLoaded(slots); free && taken.length < count; free = leastLoaded(slots)) {
      free.inflight++;
      const id = randomUUID();
      leases[id] = { instanceId: free.ready.instanceId, replica: this.#replica, until: Date.now() + LEASE_MS };
      taken.push({ id, versionId, instance: free.ready });
    }
    return taken;
  }

  #renew(leases: Leases, held: Set<string>) {
    for (const id of held) if (leases[id]) leases[id].until = Date.now() + LEASE_MS;
  }

  /** Up to `count` slots with room at the time of the write (instances are read then), held here. */
  async #takeNow(versionId: string, count: number, instances: () => ReadyInstance[]): Promise<Lease[]> {
    const taken = await this.#change(versionId, (leases) => this.#takeMany(versionId, leases, instances(), count));
    for (const lease of taken) this.#held(versionId).add(lease.id);
    return taken;
  }

  #held(versionId: string): Set<string> {
    let held = this.#mine.get(versionId);
    if (!held) this.#mine.set(versionId, held = new Set());
    return held;
  }

  /** Queues a change to the version's leases; resolves with what `apply` returned once it is written. */
  #change<T>(versionId: string, apply: (leases: Leases) => T): Promise<T> {
    return new Promise((resolve, reject) => {
      const changes = this.#pending.get(versionId) ?? [];
      changes.push({ apply, done: (outcome, error) => (error === undefined ? resolve(outcome as T) : reject(error)) });
      this.#pending.set(versionId, changes);
      if (!this.#writing.has(versionId)) void this.#flush(versionId);
    });
  }

  /** Writes every queued change of a version in one compare-and-set, again on a lost race, until none wait. */
  async #flush(versionId: string) {
    this.#writing.add(versionId);
    try {
      for (let batch = this.#pending.get(versionId); batch?.length; batch = this.#pending.get(versionId)) {
        this.#pending.delete(versionId);
        try {
          let outcomes: unknown[] | undefined;
          while (!outcomes) {
            const { leases, revision } = await this.#read(versionId);
            const before = JSON.stringify(leases);
            const applied = batch.map((change) => change.apply(leases));
            const after = JSON.stringify(leases);
            if (after === before || await this.#write(versionId, leases, after, revision)) outcomes = applied;
          }
          batch.forEach((change, i) => change.done(outcomes![i]));
        } catch (error) {
          for (const change of batch) change.done(undefined, error);
        }
      }
    } finally {
      this.#writing.delete(versionId);
    }
  }

  #remember(versionId: string, leases: Leases, revision: number) {
    const known = this.#entries.get(versionId);
    if (!known || known.revision < revision) this.#entries.set(versionId, { leases, revision });
  }

  /** A copy of the version's leases without the expired ones (their replica stopped renewing them). */
  async #read(versionId: string): Promise<{ leases: Leases; revision: number }> {
    if (!this.#entries.has(versionId)) {
      const entry = await this.#kv.get(versionId);
      this.#remember(versionId, entry?.operation === 'PUT' ? leasesSchema.parse(entry.json()) : {}, entry?.revision ?? 0);
    }
    const { leases, revision } = this.#entries.get(versionId)!;
    const now = Date.now();
    const live: Leases = {};
    for (const [id, lease] of Object.entries(leases)) if (lease.until >= now) live[id] = { ...lease };
    return { leases: live, revision };
  }

  /** Compare-and-set: false when another replica changed the entry first (the entry is then read again). */
  async #write(versionId: string, leases: Leases, encoded: string, revision: number): Promise<boolean> {
    try {
      const written = revision === 0 ? await this.#kv.create(versionId, encoded) : await this.#kv.update(versionId, encoded, revision);
      this.#remember(versionId, leases, written);
      return true;
    } catch (error) {
      if (!/wrong last sequence|key exists/i.test((error as Error).message)) throw error;
      this.#entries.delete(versionId);
      return false;
    }
  }

  #nextChange(versionId: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      let waiters = this.#changed.get(versionId);
      if (!waiters) this.#changed.set(versionId, waiters = new Set());
      waiters.add(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
