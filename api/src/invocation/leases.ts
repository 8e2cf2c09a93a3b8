// Instance slots shared by API replicas: one NATS KV entry per function version holds every lease on its
// instances ({leaseId: {instanceId, replica, until}}), changed only by compare-and-set on the entry's
// revision, so two replicas never take the same last slot. A replica renews its leases while their
// requests run; a killed replica's leases expire after LEASE_MS and their slots come back.
import { randomUUID } from 'node:crypto';
import type { KV } from '@nats-io/kv';
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

export class SlotLeases {
  readonly #kv: KV;
  readonly #replica: string;
  /** My leases still held, per version (renewed every RENEW_MS). */
  readonly #mine = new Map<string, Set<string>>();
  /** Wakes acquirers of a version when its entry changes (a watch per version with a head). */
  readonly #changed = new Map<string, Set<() => void>>();
  readonly #renewer: NodeJS.Timeout;

  constructor(kv: KV, replica: string) {
    this.#kv = kv;
    this.#replica = replica;
    this.#renewer = setInterval(() => void this.#renewAll(), RENEW_MS);
    this.#renewer.unref();
  }

  /**
   * A slot on the least loaded instance with room among `instances()`, waiting while all are full.
   * Undefined once `stopped()` says so.
   */
  async acquire(versionId: string, instances: () => ReadyInstance[], stopped: () => boolean): Promise<Lease | undefined> {
    while (!stopped()) {
      const { leases, revision } = await this.#read(versionId);
      const slots = instances().map((ready) => ({ ready, inflight: 0 }));
      for (const lease of Object.values(leases)) {
        const slot = slots.find((candidate) => candidate.ready.instanceId === lease.instanceId);
        if (slot) slot.inflight++;
      }
      const free = leastLoaded(slots);
      if (!free) {
        await this.#nextChange(versionId, 1000);
        continue;
      }
      const id = randomUUID();
      leases[id] = { instanceId: free.ready.instanceId, replica: this.#replica, until: Date.now() + LEASE_MS };
      if (!await this.#write(versionId, leases, revision)) continue;
      this.#held(versionId).add(id);
      return { id, versionId, instance: free.ready };
    }
    return undefined;
  }

  async release(lease: Lease) {
    this.#held(lease.versionId).delete(lease.id);
    for (;;) {
      const { leases, revision } = await this.#read(lease.versionId);
      if (!leases[lease.id]) return;
      delete leases[lease.id];
      if (await this.#write(lease.versionId, leases, revision)) return;
    }
  }

  /** The entry of a version changed (its KV watch): whoever waits for a slot looks again. */
  changed(versionId: string) {
    const waiters = this.#changed.get(versionId);
    this.#changed.delete(versionId);
    for (const wake of waiters ?? []) wake();
  }

  close() {
    clearInterval(this.#renewer);
    for (const versionId of [...this.#changed.keys()]) this.changed(versionId);
  }

  #held(versionId: string): Set<string> {
    let held = this.#mine.get(versionId);
    if (!held) this.#mine.set(versionId, held = new Set());
    return held;
  }

  /** The version's leases without the expired ones (their replica stopped renewing them). */
  async #read(versionId: string): Promise<{ leases: Leases; revision: number }> {
    const entry = await this.#kv.get(versionId);
    if (!entry || entry.operation !== 'PUT') return { leases: {}, revision: entry?.revision ?? 0 };
    const leases = leasesSchema.parse(entry.json());
    const now = Date.now();
    for (const [id, lease] of Object.entries(leases)) if (lease.until < now) delete leases[id];
    return { leases, revision: entry.revision };
  }

  /** Compare-and-set: false when another replica changed the entry first. */
  async #write(versionId: string, leases: Leases, revision: number): Promise<boolean> {
    try {
      if (revision === 0) await this.#kv.create(versionId, JSON.stringify(leases));
      else await this.#kv.update(versionId, JSON.stringify(leases), revision);
      return true;
    } catch (error) {
      if (/wrong last sequence|key exists/i.test((error as Error).message)) return false;
      throw error;
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

  async #renewAll() {
    for (const [versionId, held] of this.#mine) {
      if (held.size === 0) continue;
      for (let tries = 0; tries < 5; tries++) {
        const { leases, revision } = await this.#read(versionId).catch(() => ({ leases: undefined, revision: 0 }));
        if (!leases) break;
        for (const id of held) if (leases[id]) leases[id].until = Date.now() + LEASE_MS;
        if (await this.#write(versionId, leases, revision).catch(() => true)) break;
      }
    }
  }
}
