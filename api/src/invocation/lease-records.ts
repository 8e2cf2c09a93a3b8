// What one version's entry in the slots bucket holds (leases.ts): per replica, a record of how many requests
// it runs on each instance, until when the record counts, how many requests wait there, and which of its
// slots are spare. From the records, each replica's fair share of the slots when requests wait for them.
// And which replicas were found gone, whose records then count less.
import type { KvEntry } from '@nats-io/kv';
import { z } from 'zod';
import type { ReadyInstance } from '../control/instances/service.ts';
import { leastLoaded } from './slots.ts';

export const LEASE_MS = 15_000;
/** How long the slots a gone replica's requests ran on still count once it is found gone. */
export const GONE_GRACE_MS = 500;
/** A replica whose record blocks a take is asked whether it still answers at most this often. */
const SUSPECT_MS = 500;

const recordsSchema = z.record(z.string(), z.object({
  until: z.number(),
  inflight: z.record(z.string(), z.number().int().nonnegative()),
  waiting: z.boolean().optional(),
  /** How many requests wait there (`waiting` is kept for replicas of the release before, which know only it). */
  wants: z.number().int().nonnegative().optional(),
  /** The part of `inflight` that is spare (no request runs on it). */
  spare: z.record(z.string(), z.number().int().nonnegative()).optional(),
}));
export type Records = z.infer<typeof recordsSchema>;

/** An entry's records; one in another shape (an older release's) counts as none: its slots expire anyway. */
export function decode(entry: KvEntry | null | undefined): Records {
  if (entry?.operation !== 'PUT') return {};
  try {
    return recordsSchema.safeParse(entry.json()).data ?? {};
  } catch {
    return {};
  }
}

/** The requests `records` run, spare slots left out. */
export function runningIn(records: Records): number {
  let sum = 0;
  for (const record of Object.values(records)) sum += runningOf(record);
  return sum;
}

/** How many requests a record says wait there (a replica of the release before says only whether any do). */
export function wantsOf(record: Records[string]): number {
  return record.wants ?? (record.waiting ? 1 : 0);
}

function runningOf({ inflight, spare }: Records[string]): number {
  let sum = 0;
  for (const [instanceId, count] of Object.entries(inflight)) sum += count - (spare?.[instanceId] ?? 0);
  return sum;
}

/** How long one replica keeps a slot its share rounds up to before the next one in turn does. */
export const TURN_MS = 2_000;

/**
 * The slots `replica` may hold of `capacity`: all it wants while the replicas want no more than there
 * are, else its part in proportion to what it runs and has waiting (largest remainders get the slots left
 * over; ties take turns every TURN_MS, so no replica waits for ever behind the others). Every replica
 * reckons it from the same entry, so the shares add up to the capacity.
 */
export function fairShare(records: Records, replica: string, capacity: number, now = Date.now()): number {
  const wanted = Object.entries(records).map(([name, record]) => ({ name, wants: runningOf(record) + wantsOf(record) }));
  const sum = wanted.reduce((total, { wants }) => total + wants, 0);
  if (sum <= capacity) return Infinity;
  const parts = wanted.map(({ name, wants }) => ({ name, exact: (capacity * wants) / sum, turn: turnOf(name, Math.floor(now / TURN_MS)) }));
  const left = capacity - parts.reduce((total, part) => total + Math.floor(part.exact), 0);
  parts.sort((a, b) => (b.exact % 1) - (a.exact % 1) || a.turn - b.turn);
  const index = parts.findIndex((part) => part.name === replica);
  return index === -1 ? 0 : Math.floor(parts[index].exact) + (index < left ? 1 : 0);
}

/** A replica's place among equals in one turn: the same on every replica, different from turn to turn. */
function turnOf(replica: string, turn: number): number {
  let hash = turn;
  for (let i = 0; i < replica.length; i++) hash = Math.imul(hash ^ replica.charCodeAt(i), 0x9e3779b1);
  return hash >>> 0;
}

/** Slots per instance of one version. */
export type Tally = Map<string, number>;

export function add(tally: Tally, instanceId: string, change: number) {
  const count = (tally.get(instanceId) ?? 0) + change;
  if (count > 0) tally.set(instanceId, count);
  else tally.delete(instanceId);
}

export function total(tally: Tally): number {
  let sum = 0;
  for (const count of tally.values()) sum += count;
  return sum;
}

/** Up to `count` slots on the least loaded of `slots` with room, counted in `tally`; their instances. */
export function takeLeastLoaded(slots: { ready: ReadyInstance; inflight: number }[], count: number, tally: Tally): ReadyInstance[] {
  const taken: ReadyInstance[] = [];
  for (let free = leastLoaded(slots); free && taken.length < count; free = leastLoaded(slots)) {
    free.inflight++;
    add(tally, free.ready.instanceId, 1);
    taken.push(free.ready);
  }
  return taken;
}

/** This replica's part of one version's entry: the slots its requests run on, and spare ones it counts too. */
export class Share {
  readonly running: Tally = new Map();
  readonly spare: Tally = new Map();
  /** A spare slot was taken since the last renewal. */
  spareUsed = false;
  /** Requests waiting here for slots: the other replicas give way to a fair share. */
  waiting = 0;
  /** The count of waiting requests its record says (written again when it moves far from it). */
  written = 0;

  get empty(): boolean {
    return this.running.size === 0 && this.spare.size === 0 && !this.waiting;
  }

  /** Its record, or undefined when it counts nothing. */
  record(running = this.running, spare = this.spare): Records[string] | undefined {
    if (!running.size && !spare.size && !this.waiting) return undefined;
    const inflight = Object.fromEntries(running);
    for (const [instanceId, count] of spare) inflight[instanceId] = (inflight[instanceId] ?? 0) + count;
    return {
      until: Date.now() + LEASE_MS, inflight, ...(this.waiting ? { waiting: true, wants: this.waiting } : {}), ...(spare.size ? { spare: Object.fromEntries(spare) } : {}),
    };
  }
}

/**
 * Replicas found gone (their NATS subjects have no responder: killed, or cut off). A gone replica counts
 * nothing spare and waits for nothing from then on; what its requests were running counts for
 * GONE_GRACE_MS more (an instance may still be finishing them), then nothing. A record it writes after
 * the verdict counts again.
 */
export class GoneReplicas {
  readonly #self: string;
  /** Replica → when it was found gone. */
  readonly #gone = new Map<string, number>();
  /** Replica → when it was last asked whether it answers. */
  readonly #asked = new Map<string, number>();

  constructor(self: string) {
    this.#self = self;
  }

  /** A replica no longer answers; false when it was known already (or is this one). */
  found(replica: string): boolean {
    if (replica === this.#self || this.#gone.has(replica)) return false;
    this.#gone.set(replica, Date.now());
    return true;
  }

  /** The other replicas counted in `records` not known gone and not asked within SUSPECT_MS: asked now. */
  suspects(records: Records): string[] {
    const now = Date.now();
    const suspects = Object.keys(records).filter((replica) => replica !== this.#self && !this.#gone.has(replica) && now - (this.#asked.get(replica) ?? 0) >= SUSPECT_MS);
    for (const replica of suspects) this.#asked.set(replica, now);
    return suspects;
  }

  /**
   * What still counts of `records`: none expired; of a replica found gone after it wrote its record, only
   * what its requests ran on, and that only for GONE_GRACE_MS.
   */
  live(records: Records): Records {
    const now = Date.now();
    const live: Records = {};
    for (const [replica, record] of Object.entries(records)) {
      if (record.until < now) continue;
      const goneAt = this.#gone.get(replica);
      if (goneAt === undefined || record.until - LEASE_MS > goneAt) {
        // Written after the verdict: it answers again (it was cut off, not dead), and may be asked again.
        if (goneAt !== undefined) this.#gone.delete(replica);
        live[replica] = record;
        continue;
      }
      if (now > goneAt + GONE_GRACE_MS) continue;
      const inflight: Record<string, number> = {};
      for (const [instanceId, count] of Object.entries(record.inflight)) {
        const running = count - (record.spare?.[instanceId] ?? 0);
        if (running > 0) inflight[instanceId] = running;
      }
      live[replica] = { until: record.until, inflight };
    }
    return live;
  }
}
