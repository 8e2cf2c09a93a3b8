// Instance slots shared by API replicas: one NATS KV entry per function version holds, per replica, how many
// requests it runs on each instance ({replica: {until, inflight: {instanceId: n}}}). A replica writes only
// its own record, from its own tally, by compare-and-set on the entry's revision, so two replicas never take
// the same last slot. The entry's size grows with replicas and instances, not with requests in flight. A
// replica rewrites its record while it runs requests; a killed replica's record expires after LEASE_MS and
// its slots come back.
// Entries are cached from the bucket's watch, and a replica's changes to one version wait for its write
// in flight and then go together in the next one: one round trip per batch, not per request.
import { randomUUID } from 'node:crypto';
import type { KV, KvEntry } from '@nats-io/kv';
import { z } from 'zod';
import type { ReadyInstance } from '../control/instances/service.ts';
import { leastLoaded } from './slots.ts';

export const LEASE_MS = 15_000;
const RENEW_MS = LEASE_MS / 3;

const recordsSchema = z.record(z.string(), z.object({ until: z.number(), inflight: z.record(z.string(), z.number().int().nonnegative()) }));
type Records = z.infer<typeof recordsSchema>;

/** An entry's records; one in another shape (an older release's) counts as none: its slots expire anyway. */
function decode(entry: KvEntry | null | undefined): Records {
  if (entry?.operation !== 'PUT') return {};
  try {
    return recordsSchema.safeParse(entry.json()).data ?? {};
  } catch {
    return {};
  }
}

/** One slot taken: `id` tells a grant asked again from a new one. */
export interface Lease {
  id: string;
  versionId: string;
  instance: ReadyInstance;
}

/** Requests this replica runs, per instance of one version. */
type Tally = Map<string, number>;

export class SlotLeases {
  readonly #kv: KV;
  readonly #replica: string;
  /** What this replica runs, per version: what its record says once written. */
  readonly #tallies = new Map<string, Tally>();
  /** Wakes acquirers of a version when its entry changes. */
  readonly #changed = new Map<string, Set<() => void>>();
  /** The latest entry per version seen (watch or own writes): its records and revision. */
  readonly #entries = new Map<string, { records: Records; revision: number }>();
  /** Takes waiting for the version's write in flight; a version here with none only needs its record written. */
  readonly #pending = new Map<string, Take[]>();
  readonly #writing = new Set<string>();
  readonly #renewer: NodeJS.Timeout;

  constructor(kv: KV, replica: string) {
    this.#kv = kv;
    this.#replica = replica;
    this.#renewer = setInterval(() => {
      for (const [versionId, tally] of this.#tallies) if (tally.size) void this.#publish(versionId).catch(() => {});
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
      const taken = await this.#take(versionId, count, instances);
      if (taken.length) return taken;
      await this.#nextChange(versionId, 1000);
    }
    return undefined;
  }

  /** A slot if an instance has room now; undefined without waiting. */
  async tryAcquire(versionId: string, instances: () => ReadyInstance[]): Promise<Lease | undefined> {
    return (await this.#take(versionId, 1, instances))[0];
  }

  /**
   * A slot another replica took for a request that runs here: counted here from now on. Resolves once
   * written, so the replica that took it may stop counting it without the slot ever counting nowhere.
   */
  hold(lease: Lease): Promise<void> {
    this.#count(lease, 1);
    return this.#publish(lease.versionId);
  }

  /** A slot handed to the replica whose request it serves (which counts it already). */
  handOver(lease: Lease): Promise<void> {
    return this.release(lease);
  }

  release(lease: Lease): Promise<void> {
    this.#count(lease, -1);
    return this.#publish(lease.versionId);
  }

  /** The entry of a version changed (the bucket's watch): cached, and whoever waits for a slot looks again. */
  changed(versionId: string, entry?: KvEntry) {
    // Most entries are this replica's own writes, already cached: decoded only when newer.
    const known = this.#entries.get(versionId)?.revision ?? -1;
    if (entry && entry.revision > known) this.#remember(versionId, decode(entry), entry.revision);
    const waiters = this.#changed.get(versionId);
    this.#changed.delete(versionId);
    for (const wake of waiters ?? []) wake();
  }

  close() {
    clearInterval(this.#renewer);
    for (const versionId of [...this.#changed.keys()]) this.changed(versionId);
  }

  #tally(versionId: string): Tally {
    let tally = this.#tallies.get(versionId);
    if (!tally) this.#tallies.set(versionId, tally = new Map());
    return tally;
  }

  #count(lease: Lease, change: 1 | -1) {
    const tally = this.#tally(lease.versionId);
    const count = (tally.get(lease.instance.instanceId) ?? 0) + change;
    if (count > 0) tally.set(lease.instance.instanceId, count);
    else tally.delete(lease.instance.instanceId);
  }

  /** Up to `count` slots with room at the time of the write (instances are read then), counted here. */
  #take(versionId: string, count: number, instances: () => ReadyInstance[]): Promise<Lease[]> {
    return new Promise((resolve, reject) => {
      this.#queue(versionId, { count, instances, done: (taken, error) => (error === undefined ? resolve(taken) : reject(error)) });
    });
  }

  /** Writes this replica's record of the version with the next batch. */
  #publish(versionId: string): Promise<void> {
    return this.#take(versionId, 0, () => []).then(() => undefined);
  }

  #queue(versionId: string, take: Take) {
    const takes = this.#pending.get(versionId);
    if (takes) takes.push(take);
    else this.#pending.set(versionId, [take]);
    if (!this.#writing.has(versionId)) void this.#flush(versionId);
  }

  /** Writes every queued take of a version with this replica's record, in one compare-and-set, until none wait. */
  async #flush(versionId: string) {
    this.#writing.add(versionId);
    try {
      for (let batch = this.#pending.get(versionId); batch; batch = this.#pending.get(versionId)) {
        this.#pending.delete(versionId);
        try {
          const outcomes = await this.#write(versionId, batch);
          batch.forEach((take, i) => take.done(outcomes[i]));
        } catch (error) {
          for (const take of batch) take.done([], error);
        }
      }
    } finally {
      this.#writing.delete(versionId);
    }
  }

  /** The batch's takes against the latest entry, and this replica's record written; again on a lost race. */
  async #write(versionId: string, batch: Take[]): Promise<Lease[][]> {
    for (;;) {
      const { records, revision } = await this.#read(versionId);
      const tally = new Map(this.#tally(versionId));
      const outcomes = batch.map((take) => this.#takeMany(versionId, records, tally, take));
      if (batch.every((take) => take.count > 0) && outcomes.every((taken) => taken.length === 0)) return outcomes;
      const until = Date.now() + LEASE_MS;
      if (tally.size) records[this.#replica] = { until, inflight: Object.fromEntries(tally) };
      else delete records[this.#replica];
      if (await this.#compareAndSet(versionId, records, revision)) {
        for (const taken of outcomes) for (const lease of taken) this.#count(lease, 1);
        return outcomes;
      }
    }
  }

  /** Up to `take.count` leases on the least loaded instances with room, counted in `tally`. */
  #takeMany(versionId: string, records: Records, tally: Tally, take: Take): Lease[] {
    if (take.count === 0) return [];
    const slots = take.instances().map((ready) => ({ ready, inflight: tally.get(ready.instanceId) ?? 0 }));
    for (const [replica, record] of Object.entries(records)) {
      if (replica === this.#replica) continue;
      for (const slot of slots) slot.inflight += record.inflight[slot.ready.instanceId] ?? 0;
    }
    const taken: Lease[] = [];
    for (let free = leastLoaded(slots); free && taken.length < take.count; free = leastLoaded(slots)) {
      free.inflight++;
      tally.set(free.ready.instanceId, (tally.get(free.ready.instanceId) ?? 0) + 1);
      taken.push({ id: randomUUID(), versionId, instance: free.ready });
    }
    return taken;
  }

  #remember(versionId: string, records: Records, revision: number) {
    const known = this.#entries.get(versionId);
    if (!known || known.revision < revision) this.#entries.set(versionId, { records, revision });
  }

  /** The version's records without the expired ones (their replica stopped writing), to change. */
  async #read(versionId: string): Promise<{ records: Records; revision: number }> {
    if (!this.#entries.has(versionId)) {
      const entry = await this.#kv.get(versionId);
      this.#remember(versionId, decode(entry), entry?.revision ?? 0);
    }
    const { records, revision } = this.#entries.get(versionId)!;
    const now = Date.now();
    const live: Records = {};
    for (const [replica, record] of Object.entries(records)) if (record.until >= now) live[replica] = record;
    return { records: live, revision };
  }

  /** False when another replica changed the entry first (the entry is then read again). */
  async #compareAndSet(versionId: string, records: Records, revision: number): Promise<boolean> {
    const encoded = JSON.stringify(records);
    try {
      const written = revision === 0 ? await this.#kv.create(versionId, encoded) : await this.#kv.update(versionId, encoded, revision);
      this.#remember(versionId, records, written);
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

/** Slots wanted in the next write; a count of 0 only wants this replica's record written. */
interface Take {
  count: number;
  instances(): ReadyInstance[];
  done(taken: Lease[], error?: unknown): void;
}
