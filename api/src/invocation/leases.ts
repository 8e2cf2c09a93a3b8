// Instance slots shared by API replicas: one NATS KV entry per function version holds, per replica, how many
// requests it runs on each instance ({replica: {until, inflight: {instanceId: n}}}). A replica writes only
// its own record, from its own tally, by compare-and-set on the entry's revision, so two replicas never take
// the same last slot. The entry's size grows with replicas and instances, not with requests in flight. A
// replica rewrites its record while it runs requests; a killed replica's record expires after LEASE_MS and
// its slots come back.
// Entries are cached from the bucket's watch, and a replica's changes to one version wait for its write
// in flight and then go together in the next one: one round trip per batch, not per request.
// A replica also counts a few spare slots: a request takes one and gives it back without a write. A
// replica with requests waiting for slots says how many in its record: then the others give up their spare
// slots, and while the replicas want more slots than there are each takes and keeps only its fair share
// (lease-records.ts, fairShare), so the slots are shared in proportion to the requests at each. A replica
// whose requests wait keeps a slot for the next of them without a write (the queue asks `keeps`). Spare
// slots unused for a renewal period go back.
// A replica whose record keeps a take from a slot is asked whether it still answers; one found gone counts
// less from then on (lease-records.ts, GoneReplicas). The entry's records and this replica's Share of them
// are in lease-records.ts.
import { randomUUID } from 'node:crypto';
import type { KV, KvEntry } from '@nats-io/kv';
import type { ReadyInstance } from '../control/instances/service.ts';
import { add, decode, fairShare, wantsOf, GONE_GRACE_MS, GoneReplicas, LEASE_MS, runningIn, Share, takeLeastLoaded, total, TURN_MS, type Records, type Tally } from './lease-records.ts';

const RENEW_MS = LEASE_MS / 3;

/** One slot taken: `id` tells a grant asked again from a new one. */
export interface Lease {
  id: string;
  versionId: string;
  instance: ReadyInstance;
}

/** Spare slots a replica keeps at most. */
const SPARE_MAX = 32;
/** A record whose write failed is written again after this long. */
const REWRITE_MS = 500;
/** An acquirer that found no room and saw no change for this long reads the entry again (its watch may be down). */
const RECHECK_MS = 1_000;
/** The count of waiting requests a record says is written again once the count is this far from it (×/÷). */
const WAITING_STEP = 1.5;

export class SlotLeases {
  readonly #kv: KV;
  readonly #replica: string;
  /** This replica's part of each version's entry: what its record says once written. */
  readonly #shares = new Map<string, Share>();
  /** Wakes acquirers of a version when its entry changes. */
  readonly #changed = new Map<string, Set<() => void>>();
  /** How often each version's acquirers were woken (an acquirer busy at the time looks again). */
  readonly #wakes = new Map<string, number>();
  /** The latest entry per version seen (watch or own writes): its records and revision. */
  readonly #entries = new Map<string, { records: Records; revision: number }>();
  /** Takes waiting for the version's write in flight; a version here with none only needs its record written. */
  readonly #pending = new Map<string, Take[]>();
  readonly #writing = new Set<string>();
  readonly #renewer: NodeJS.Timeout;
  readonly #gone: GoneReplicas;
  /** Versions deleted: nothing is written for them until they have instances again. */
  readonly #retired = new Set<string>();
  readonly #isGone: (replica: string) => Promise<boolean>;
  readonly #recheckMs: number;
  /** Versions whose record is written again after a failed write. */
  readonly #rewrites = new Map<string, NodeJS.Timeout>();
  /** Each version's fair share as last reckoned, until its entry, its capacity or the turn changes (`keeps` runs per request). */
  readonly #fairShares = new Map<string, { revision: number; capacity: number; turn: number; share: number }>();

  /**
   * `isGone` asks whether a replica no longer answers (only while its record keeps a take from a slot);
   * an acquirer that finds no room looks again after `recheckMs` without a change.
   */
  constructor(kv: KV, replica: string, isGone: (replica: string) => Promise<boolean> = async () => false, recheckMs = RECHECK_MS) {
    this.#kv = kv;
    this.#replica = replica;
    this.#recheckMs = recheckMs;
    this.#gone = new GoneReplicas(replica);
    this.#isGone = isGone;
    this.#renewer = setInterval(() => {
      for (const [versionId, share] of this.#shares) {
        if (share.empty) continue;
        if (!share.spareUsed) share.spare.clear();
        share.spareUsed = false;
        this.#writeSoon(versionId);
      }
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

  /**
   * Up to `count` slots in one write (at least one, waiting while all are full); undefined once stopped.
   * `full` is told when there was room for fewer than `count`.
   */
  async acquireMany(versionId: string, count: number, instances: () => ReadyInstance[], stopped: () => boolean, full?: () => void): Promise<Lease[] | undefined> {
    while (!stopped()) {
      // A slot given back while the take was being written wakes nobody yet: it is looked for again at once.
      const seen = this.#wakes.get(versionId) ?? 0;
      const taken = await this.#take(versionId, { count, instances });
      if (taken.length < count) full?.();
      if (taken.length) return taken;
      // No room: a replica that died may still be counted for slots it no longer uses.
      if (await this.#foundGone(versionId)) continue;
      if ((this.#wakes.get(versionId) ?? 0) !== seen) continue;
      // No change seen for a while: the watch may be down (a NATS failover), so the entry is read again.
      if (!await this.#nextChange(versionId, this.#recheckMs)) this.#entries.delete(versionId);
    }
    return undefined;
  }

  /** Requests of the version waiting on the other replicas, as their records last said. */
  waitingElsewhere(versionId: string): number {
    const records = this.#gone.live(this.#entries.get(versionId)?.records ?? {});
    let sum = 0;
    for (const replica in records) if (replica !== this.#replica) sum += wantsOf(records[replica]);
    return sum;
  }

  /** Requests running on the version now, by every replica whose record still counts (spare slots not). */
  running(versionId: string): number {
    return runningIn(this.#gone.live(this.#entries.get(versionId)?.records ?? {}));
  }

  /**
   * How many requests of the version wait here for slots: the record says so (written when the count
   * starts, ends, or moves far from what it says), and the others give way to a fair share.
   */
  wait(versionId: string, waiting: number) {
    const share = this.#share(versionId);
    share.waiting = waiting;
    const { written } = share;
    if ((waiting === 0) !== (written === 0) || waiting >= written * WAITING_STEP || waiting * WAITING_STEP <= written) this.#writeSoon(versionId);
  }

  /** A spare slot on one of `instances`, taken with no write; undefined when there is none. */
  takeSpare(versionId: string, instances: ReadyInstance[]): Lease | undefined {
    return this.#fromSpare(versionId, 1, instances)[0];
  }

  /** A slot if an instance has room now, within this replica's share; undefined without waiting. */
  async tryAcquire(versionId: string, instances: () => ReadyInstance[]): Promise<Lease | undefined> {
    return (await this.#take(versionId, { count: 1, instances }))[0];
  }

  /**
   * Whether a slot whose request is done here may serve the next request waiting here, with no write:
   * while this replica runs no more than its fair share of `instances`.
   */
  keeps(versionId: string, instances: ReadyInstance[]): boolean {
    const entry = this.#entries.get(versionId);
    const key = { revision: entry?.revision ?? 0, capacity: capacityOf(instances), turn: Math.floor(Date.now() / TURN_MS) };
    let known = this.#fairShares.get(versionId);
    if (known?.revision !== key.revision || known.capacity !== key.capacity || known.turn !== key.turn) {
      known = { ...key, share: fairShare(this.#gone.live(entry?.records ?? {}), this.#replica, key.capacity) };
      this.#fairShares.set(versionId, known);
    }
    return total(this.#share(versionId).running) <= known.share;
  }

  /** The request is done: its slot is kept spare (no write), unless there are enough or others wait. */
  release(lease: Lease): Promise<void> {
    const share = this.#share(lease.versionId);
    add(share.running, lease.instance.instanceId, -1);
    if (total(share.spare) >= SPARE_MAX || this.#othersWait(lease.versionId)) return this.#publish(lease.versionId);
    add(share.spare, lease.instance.instanceId, 1);
    // No write, so no watch event: whoever waits here for a slot is told directly.
    this.#wake(lease.versionId);
    return Promise.resolve();
  }

  /** A replica no longer answers: its spare slots and its wait count no more (its running ones a moment more). */
  gone(replica: string) {
    if (!this.#gone.found(replica)) return;
    for (const versionId of this.#entries.keys()) this.changed(versionId);
    const grace = setTimeout(() => {
      for (const versionId of this.#entries.keys()) this.changed(versionId);
    }, GONE_GRACE_MS + 10);
    grace.unref();
  }

  /** The version was deleted: its share is dropped and nothing more is written for it (its entry is gone). */
  retire(versionId: string) {
    this.#retired.add(versionId);
    this.#fairShares.delete(versionId);
    this.#shares.delete(versionId);
    this.#entries.delete(versionId);
    this.#wake(versionId);
    this.#wakes.delete(versionId);
  }

  /** The version has instances again (deployed anew). */
  revive(versionId: string) {
    this.#retired.delete(versionId);
  }

  /** The entry of a version changed (the bucket's watch): cached, and whoever waits for a slot looks again. */
  changed(versionId: string, entry?: KvEntry) {
    this.#fairShares.delete(versionId);
    // Most entries are this replica's own writes, already cached: decoded only when newer.
    const known = this.#entries.get(versionId)?.revision ?? -1;
    if (entry && entry.revision > known) this.#remember(versionId, decode(entry), entry.revision);
    // Another replica's requests wait: spare slots here go to them.
    const share = this.#shares.get(versionId);
    if (share?.spare.size && this.#othersWait(versionId)) {
      share.spare.clear();
      this.#writeSoon(versionId);
    }
    this.#wake(versionId);
  }

  #wake(versionId: string) {
    this.#wakes.set(versionId, (this.#wakes.get(versionId) ?? 0) + 1);
    const waiters = this.#changed.get(versionId);
    this.#changed.delete(versionId);
    for (const wake of waiters ?? []) wake();
  }

  close() {
    clearInterval(this.#renewer);
    for (const timer of this.#rewrites.values()) clearTimeout(timer);
    for (const versionId of [...this.#changed.keys()]) this.changed(versionId);
  }

  #share(versionId: string): Share {
    let share = this.#shares.get(versionId);
    if (!share) this.#shares.set(versionId, share = new Share());
    return share;
  }

  /** Whether another replica's record says requests wait there (the latest entry seen, or `records`). */
  #othersWait(versionId: string, records = this.#gone.live(this.#entries.get(versionId)?.records ?? {})): boolean {
    return othersWaitIn(records, this.#replica);
  }

  /** Asks the other replicas counted in the version's entry whether they still answer; true when one is gone. */
  async #foundGone(versionId: string): Promise<boolean> {
    const suspects = this.#gone.suspects(this.#gone.live(this.#entries.get(versionId)?.records ?? {}));
    const verdicts = await Promise.all(suspects.map((replica) => this.#isGone(replica).catch(() => false)));
    suspects.filter((_, index) => verdicts[index]).forEach((replica) => this.gone(replica));
    return verdicts.some(Boolean);
  }

  /**
   * Up to `want.count` slots: spare ones at once, the rest where there is room at the time of the write
   * (instances are read then), counted here.
   */
  #take(versionId: string, want: Want): Promise<Lease[]> {
    const spared = want.count > 0 ? this.#fromSpare(versionId, want.count, want.instances()) : [];
    if (want.count > 0 && spared.length === want.count) return Promise.resolve(spared);
    const written = new Promise<Lease[]>((resolve, reject) => {
      this.#queue(versionId, { ...want, count: want.count - spared.length, done: (taken, error) => (error === undefined ? resolve(taken) : reject(error)) });
    });
    // The spare slots are taken already: a failed write for the rest still returns them.
    return spared.length ? written.then((more) => spared.concat(more), () => spared) : written;
  }

  /** Spare slots on the least busy of `instances`; spare ones on instances no longer there are let go. */
  #fromSpare(versionId: string, count: number, instances: ReadyInstance[]): Lease[] {
    const share = this.#share(versionId);
    if (!share.spare.size) return [];
    const there = new Map(instances.map((ready) => [ready.instanceId, ready]));
    let gone = false;
    for (const instanceId of share.spare.keys()) {
      if (there.has(instanceId)) continue;
      share.spare.delete(instanceId);
      gone = true;
    }
    if (gone) this.#writeSoon(versionId);
    const taken: Lease[] = [];
    while (taken.length < count && share.spare.size) {
      let best: string | undefined;
      for (const instanceId of share.spare.keys()) {
        if (best === undefined || (share.running.get(instanceId) ?? 0) < (share.running.get(best) ?? 0)) best = instanceId;
      }
      add(share.spare, best!, -1);
      add(share.running, best!, 1);
      taken.push({ id: randomUUID(), versionId, instance: there.get(best!)! });
    }
    if (taken.length) share.spareUsed = true;
    return taken;
  }

  /**
   * A write failed (a NATS failover): the record may still count slots given back here, or spare ones
   * others wait for, and nothing else would rewrite it before it expires (LEASE_MS). Written again soon.
   */
  #rewriteLater(versionId: string) {
    if (this.#rewrites.has(versionId)) return;
    const timer = setTimeout(() => {
      this.#rewrites.delete(versionId);
      this.#writeSoon(versionId);
    }, REWRITE_MS);
    timer.unref();
    this.#rewrites.set(versionId, timer);
  }

  /** The record written with the next batch, nobody waiting on it: a failed write is made good by the next. */
  #writeSoon(versionId: string) {
    void this.#publish(versionId).catch(() => {});
  }

  /** Writes this replica's record of the version with the next batch. */
  #publish(versionId: string): Promise<void> {
    if (this.#retired.has(versionId)) return Promise.resolve();
    return this.#take(versionId, { count: 0, instances: () => [] }).then(() => undefined);
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
          this.#rewriteLater(versionId);
        }
      }
    } finally {
      this.#writing.delete(versionId);
    }
  }

  /** The batch's takes against the latest entry, and this replica's record written; again on a lost race. */
  async #write(versionId: string, batch: Take[]): Promise<Lease[][]> {
    const share = this.#share(versionId);
    for (;;) {
      const { records, revision } = await this.#read(versionId);
      const running = new Map(share.running);
      const spare = new Map(share.spare);
      const room = { left: this.#roomInShare(records, share, batch) };
      const outcomes = batch.map((take) => this.#takeMany(versionId, records, running, spare, take, room));
      const extra = outcomes.some((taken) => taken.length) && !this.#othersWait(versionId, records)
        ? this.#spareMore(records, running, spare, batch) : new Map<string, number>();
      if (batch.every((take) => take.count > 0) && outcomes.every((taken) => taken.length === 0)) return outcomes;
      const { waiting } = share;
      const record = share.record(running, spare);
      if (record) records[this.#replica] = record;
      else delete records[this.#replica];
      if (await this.#compareAndSet(versionId, records, revision)) {
        share.written = waiting;
        for (const taken of outcomes) for (const lease of taken) add(share.running, lease.instance.instanceId, 1);
        // Another replica began to wait during the write: the spare slots just written go to it.
        if (this.#othersWait(versionId)) {
          if (extra.size) this.#writeSoon(versionId);
        } else {
          for (const [instanceId, count] of extra) add(share.spare, instanceId, count);
        }
        return outcomes;
      }
    }
  }

  /** Slots counted on each of `instances`: everyone's records but this replica's, plus `mine`. */
  #load(records: Records, instances: ReadyInstance[], mine: Tally[]) {
    const slots = instances.map((ready) => ({ ready, inflight: mine.reduce((sum, tally) => sum + (tally.get(ready.instanceId) ?? 0), 0) }));
    for (const [replica, record] of Object.entries(records)) {
      if (replica === this.#replica) continue;
      for (const slot of slots) slot.inflight += record.inflight[slot.ready.instanceId] ?? 0;
    }
    return slots;
  }

  /** Up to `take.count` leases (and `room.left`) on the least loaded instances with room, counted in `running`. */
  #takeMany(versionId: string, records: Records, running: Tally, spare: Tally, take: Take, room: { left: number }): Lease[] {
    if (take.count === 0 || room.left <= 0) return [];
    const slots = this.#load(records, take.instances(), [running, spare]);
    const taken = takeLeastLoaded(slots, Math.min(take.count, room.left), running).map((instance) => ({ id: randomUUID(), versionId, instance }));
    room.left -= taken.length;
    return taken;
  }

  /**
   * How many more slots this replica may take in one write: its fair share less what it runs, reckoned
   * with its record as the write will leave it (the requests waiting here, or those the batch wants).
   */
  #roomInShare(records: Records, share: Share, batch: Take[]): number {
    const wanted = batch.reduce((sum, take) => sum + take.count, 0);
    const instances = batch.find((take) => take.count > 0)?.instances() ?? [];
    if (!wanted || !othersWaitIn(records, this.#replica)) return Infinity;
    const mine = { until: Infinity, inflight: Object.fromEntries(share.running), wants: Math.max(share.waiting, wanted) };
    return fairShare({ ...records, [this.#replica]: mine }, this.#replica, capacityOf(instances)) - total(share.running);
  }

  /** Spare slots added to `spare`: up to SPARE_MAX, and at most half the room left after the batch's takes. */
  #spareMore(records: Records, running: Tally, spare: Tally, batch: Take[]): Tally {
    const extra: Tally = new Map();
    const slots = this.#load(records, batch.find((take) => take.count > 0)!.instances(), [running, spare]);
    const room = slots.reduce((sum, slot) => sum + Math.max(0, slot.ready.maxRequestConcurrency - slot.inflight), 0);
    for (const ready of takeLeastLoaded(slots, Math.min(SPARE_MAX - total(spare), Math.floor(room / 2)), spare)) add(extra, ready.instanceId, 1);
    return extra;
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
    return { records: this.#gone.live(records), revision };
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

  /** True when the version's entry changed within `ms`. */
  #nextChange(versionId: string, ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      let waiters = this.#changed.get(versionId);
      if (!waiters) this.#changed.set(versionId, waiters = new Set());
      waiters.add(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
}

/** Slots wanted; a count of 0 only wants this replica's record written. */
interface Want {
  count: number;
  instances(): ReadyInstance[];
}

/** Whether a replica other than `self` says requests wait there. */
function othersWaitIn(records: Records, self: string): boolean {
  for (const replica in records) if (replica !== self && records[replica].waiting) return true;
  return false;
}

/** The slots `instances` have in all. */
function capacityOf(instances: ReadyInstance[]): number {
  return instances.reduce((sum, instance) => sum + instance.maxRequestConcurrency, 0);
}

/** Slots wanted in the next write. */
interface Take extends Want {
  done(taken: Lease[], error?: unknown): void;
}
