// The InvocationQueue for several API replicas on one store (docs/architecture.md, "Several API replicas").
// The replica a client reached keeps its connection and the request body, and itself sends the request
// to the instance. NATS JetStream decides the order and the slot:
// - a ticket {id, replica} per waiting request in the version's work-queue stream (tickets.ts,
//   queue-streams.ts: FIFO; max_msgs is the queue limit, so a full queue is refused by the broker for every
//   replica at once);
// - one durable consumer per version, pulled only by the replica holding the version's head (queue-head.ts,
//   head-lock.ts; another replica takes it over when it has waited for a grant and finds the holder gone):
//   it takes tickets in order, their slot leases in one write (leases.ts), and sends the grants in order
//   to the tickets' replicas (replica-grants.ts), which adopt a stored 202 whose replica is gone;
// - a request that finds nothing of its version waiting and a slot free (leases.ts) takes it at once, on
//   any replica, and never becomes a ticket;
// - ready instances are published by the placement replica and watched by all (ready-set.ts); they and the
//   grants are signed (replica-signing.ts). Every name on the server starts with the installation's prefix
//   (nats.ts);
// - an idle version costs no message: the buckets are watched, nothing is polled; the placement replica
//   deletes a version's stream and keys once placement no longer knows it (retain).
import { randomUUID } from 'node:crypto';
import type { NatsConnection, RequestError, Subscription } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import { KvWatchInclude, type KV, type KvEntry } from '@nats-io/kv';
import type { ReadyInstance } from '../control/instances/service.ts';
import { Problem } from '../domain/problem.ts';
import type { Logger } from '../logger.ts';
import type { HeadEntry } from './head-lock.ts';
import type { Invocation } from './invocation.ts';
import { SlotLeases, type Lease } from './leases.ts';
import { outlastFailover, outlastingFailover } from './failover.ts';
import { connectNats, named, natsNames, type NatsNames, type NatsServer } from './nats.ts';
import type { SharedQueue } from './queue.ts';
import { VersionHead } from './queue-head.ts';
import { openBucket, QueueStreams } from './queue-streams.ts';
import { ReadySet } from './ready-set.ts';
import { GRANT_TIMEOUT_MS, ReplicaGrants } from './replica-grants.ts';
import type { ReplicaSigner } from './replica-signing.ts';
import { grantOnce, type Grant } from './slots.ts';
import { Tickets } from './tickets.ts';

const DEPTH_REFRESH_MS = 1_000;
/** A version's depth is read again while its slots changed this recently (someone invokes it). */
const ACTIVE_MS = 5_000;
/** A ticket of this replica waiting this long sends it to see whether the head's holder still answers. */
const HEAD_CHECK_MS = 300;
/**
 * A ticket of this replica waiting this long tells the head's holder, which pulls afresh if it has had
 * nothing to grant for as long (queue-head.ts, `stalled`).
 */
const STALLED_MS = 1_000;

export interface JetStreamQueueOptions {
  nats: NatsServer;
  /** Signs and checks what replicas tell each other about where requests go. */
  signer: ReplicaSigner;
  maxDepth: number;
  log: Logger;
  /** A stored 202 whose replica is gone, claimed to run here (granted its slot next); undefined when it is not claimable. */
  adopt(requestId: string): Promise<Invocation | undefined>;
}

/** A bucket's watch: its entries as they change, until stopped. */
type Watch = AsyncIterable<KvEntry> & { stop(): void };

export class JetStreamQueue implements SharedQueue {
  readonly replicaId = `replica-${randomUUID().slice(0, 8)}`;
  readonly #nc: NatsConnection;
  readonly #js: JetStreamClient;
  readonly #kvs: { ready: KV; slots: KV; heads: KV };
  readonly #streams: QueueStreams;
  readonly #readySet: ReadySet;
  readonly #tickets = new Tickets();
  readonly #leases: SlotLeases;
  readonly #grants: ReplicaGrants;
  readonly #options: JetStreamQueueOptions;
  readonly #names: NatsNames;
  /** The head loop of each version this replica knows instances of. */
  readonly #heads = new Map<string, VersionHead>();
  /** The buckets' watches open now (#follow). */
  readonly #watches = new Set<Watch>();
  /** Each version's head entry as the watch last showed it. */
  readonly #headEntries = new Map<string, HeadEntry>();
  /** Versions whose tickets here are looked at again soon (#checkHead). */
  readonly #headChecks = new Map<string, NodeJS.Timeout>();
  /** Versions the placement replica knows to have a stream or keys here (deleted once placement forgets them). */
  #known: Set<string> | undefined;
  /** Rounds' retains, one after the other. */
  #retaining = Promise.resolve();
  /** Version → when its slots entry last changed (someone invokes it). */
  readonly #activity = new Map<string, number>();
  readonly #depths = new Map<string, number>();
  readonly #subscriptions: Subscription[] = [];
  #seen: (versionId: string, instances: ReadyInstance[]) => void = () => {};
  #refresher: NodeJS.Timeout | undefined;
  #closed = false;

  private constructor(nc: NatsConnection, streams: QueueStreams, kvs: { ready: KV; slots: KV; heads: KV }, options: JetStreamQueueOptions) {
    this.#nc = nc;
    this.#js = jetstream(nc);
    this.#streams = streams;
    this.#kvs = kvs;
    this.#options = options;
    this.#names = natsNames(options.nats.natsPrefix);
    this.#readySet = new ReadySet(kvs.ready, options.signer, options.log, this.#names);
    this.#leases = new SlotLeases(kvs.slots, this.replicaId, (replica) => this.#isGone(replica));
    this.#grants = new ReplicaGrants({
      nc, names: this.#names, signer: options.signer, replicaId: this.replicaId, leases: this.#leases, tickets: this.#tickets, log: options.log,
      grant: (lease) => this.#grant(lease), adopt: options.adopt, isGone: (replica) => this.#isGone(replica),
    });
  }

  /** Connects, or fails with one line naming the URL or the setting at fault. */
  static async connect(options: JetStreamQueueOptions): Promise<JetStreamQueue> {
    const { natsUrl, natsPrefix, natsTlsInsecure } = options.nats;
    // noAsyncTraces: no stack captured per request (an Error each), which cost more than the request itself.
    // Never give up on the server, and look again soon: a restarted nats-server is back within a second.
    const nc = await connectNats(options.nats, { maxReconnectAttempts: -1, reconnectTimeWait: 500, noAsyncTraces: true });
    if (natsTlsInsecure) options.log.warn({ natsUrl }, 'NATS server certificate not verified (invocation.natsTlsInsecure): for development only');
    try {
      const jsm = await jetstreamManager(nc);
      const names = natsNames(natsPrefix);
      const { natsReplicas } = options.nats;
      const buckets = await Promise.all([names.bucket('ready'), names.bucket('slots'), names.bucket('heads')].map((name) => openBucket(nc, jsm, name, natsReplicas)));
      const [ready, slots, heads] = buckets.map(({ kv }) => outlastingFailover(kv));
      const kept = Math.min(...buckets.map((opened) => opened.kept));
      if (kept < natsReplicas) options.log.warn({ natsUrl }, `${named('natsReplicas')} is ${natsReplicas}, but the server keeps ${kept} (a single server is no cluster)`);
      const streams = new QueueStreams(jsm, names, { maxDepth: options.maxDepth, copies: kept });
      const queue = new JetStreamQueue(nc, streams, { ready, slots, heads }, options);
      await queue.#start();
      options.log.info({ natsUrl, natsPrefix, replicaId: queue.replicaId }, 'invocation queue on NATS JetStream');
      return queue;
    } catch (error) {
      await nc.close();
      throw new Error(`NATS at ${natsUrl} has no usable JetStream: ${(error as Error).message}`);
    }
  }

  /** The replica's NATS connection, for the other exchanges between replicas (stage-relay.ts). */
  get connection(): NatsConnection {
    return this.#nc;
  }

  get names(): NatsNames {
    return this.#names;
  }

  onInstances(seen: (versionId: string, instances: ReadyInstance[]) => void) {
    this.#seen = seen;
  }

  async enqueue(invocation: Invocation) {
    const { versionId } = invocation;
    // Its slot writes outlast a failover on their own (the buckets are wrapped in failover.ts).
    if (await this.#runAtOnce(invocation)) return;
    await outlastFailover(() => this.#streams.ensure(versionId));
    const waiting = this.#tickets.add(invocation);
    // One ticket however often the publish goes (the stream drops a message id it has seen); a request
    // queued again later (adopted from a replica that died) takes a ticket of its own.
    const msgID = `${invocation.id}.${randomUUID()}`;
    const ticket = JSON.stringify({ id: invocation.id, replica: this.replicaId });
    try {
      waiting.seq = (await outlastFailover(() => this.#js.publish(this.#names.queueSubject(versionId), ticket, { msgID }), { idempotent: true })).seq;
      this.#checkHead(versionId);
      this.#depths.set(versionId, (this.#depths.get(versionId) ?? 0) + 1);
      // Its client left while the ticket was being written: the ticket goes too.
      if (invocation.cancelled && !this.#tickets.waits(waiting)) this.#streams.deleteTicket(versionId, waiting.seq);
    } catch (error) {
      this.#tickets.remove(invocation.id);
      if (!/maximum messages/i.test((error as Error).message)) throw error;
      throw new Problem('too-many-requests', `The queue of function version '${versionId}' is full (${this.#options.maxDepth} waiting)`, {
        headers: { 'retry-after': '1' },
      });
    }
  }

  /**
   * With no ticket of the version held at the head here or waiting from here, no other replica's request
   * waiting for a slot (leases.ts) and an instance with room, a request needs no ticket (no publish, pull
   * and ack): it runs now. A ticket still on its way from another replica can be overtaken by at most its
   * delivery.
   */
  async #runAtOnce(invocation: Invocation): Promise<boolean> {
    const { versionId } = invocation;
    const held = this.#heads.get(versionId)?.held;
    if (held !== undefined ? held > 0 : this.#tickets.has(versionId)) return false;
    const lease = await this.#leases.tryAcquire(versionId, () => this.#readySet.usable(versionId));
    if (lease) invocation.grant(this.#grant(lease));
    return lease !== undefined;
  }

  /** It held the head already: it takes the next slot directly instead of a new ticket at the tail. */
  requeue(invocation: Invocation) {
    void this.#leases.acquire(invocation.versionId, () => this.#readySet.usable(invocation.versionId), () => this.#closed)
      .then((lease) => lease && invocation.grant(this.#grant(lease)))
      .catch((error) => this.#options.log.error({ reqId: invocation.id, err: error }, 'a request queued again could not take a slot'));
  }

  remove(invocation: Invocation): boolean {
    const waiting = this.#tickets.remove(invocation.id);
    if (!waiting) return false;
    if (waiting.seq) this.#streams.deleteTicket(invocation.versionId, waiting.seq);
    return true;
  }

  async position(invocation: Invocation): Promise<number | undefined> {
    const waiting = this.#tickets.get(invocation.id);
    if (!waiting) return undefined;
    return Math.max(1, waiting.seq - await this.#streams.firstSeq(invocation.versionId) + 1);
  }

  depth(versionId: string): number {
    return this.#depths.get(versionId) ?? 0;
  }

  /** Requests running on the version's instances, sent by any replica (a graceful undeploy waits for them). */
  running(versionId: string): number {
    return this.#leases.running(versionId);
  }

  /** From placement (on the replica that runs it): published for every replica (ready-set.ts). */
  ready(versionId: string, instances: ReadyInstance[]) {
    this.#readySet.publish(versionId, instances);
  }

  /**
   * From placement after each round (on the replica that runs it): the versions it still knows. Every
   * other version's stream and keys are deleted; the first time, those left on the server are found.
   */
  retain(versionIds: ReadonlySet<string>): Promise<void> {
    this.#retaining = this.#retaining.then(async () => {
      this.#known ??= await this.#streams.onServer([this.#kvs.ready, this.#kvs.slots, this.#kvs.heads]);
      for (const versionId of versionIds) this.#known.add(versionId);
      for (const versionId of [...this.#known].filter((known) => !versionIds.has(known))) {
        this.#known.delete(versionId);
        await this.#deleteVersion(versionId);
      }
    }).catch((error) => this.#options.log.warn({ err: error }, 'could not delete the queues and keys of versions no longer deployed'));
    return this.#retaining;
  }

  /** The ready entry first (every replica lets the version go when it sees it deleted), then the rest. */
  async #deleteVersion(versionId: string) {
    this.#options.log.info({ versionId }, 'version no longer deployed: its queue and keys are deleted');
    await this.#kvs.ready.delete(versionId);
    await Promise.all([this.#kvs.slots.delete(versionId), this.#kvs.heads.delete(versionId)]);
    await this.#streams.delete(versionId);
  }

  /** Whether a replica still answers (a killed one's stored running requests are ended by the others). */
  async alive(replica: string): Promise<boolean> {
    try {
      await this.#nc.request(this.#names.replica(replica, 'ping'), '', { timeout: GRANT_TIMEOUT_MS });
      return true;
    } catch {
      return false;
    }
  }

  /** Tells every replica that a stored request has its result (their status pollers look again). */
  completed(requestId: string) {
    this.#nc.publish(this.#names.done(requestId));
  }

  /** Resolves when `completed(requestId)` is heard anywhere, or after `ms`. */
  whenCompleted(requestId: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const subscription = this.#nc.subscribe(this.#names.done(requestId), { max: 1, callback: () => finish() });
      const timer = setTimeout(() => finish(), ms);
      const finish = () => {
        clearTimeout(timer);
        subscription.unsubscribe();
        resolve();
      };
    });
  }

  async close() {
    this.#closed = true;
    clearInterval(this.#refresher);
    for (const timer of this.#headChecks.values()) clearTimeout(timer);
    const stopped = [...this.#heads.values()].map((head) => head.stop());
    this.#leases.close();
    this.#grants.close();
    for (const subscription of this.#subscriptions) subscription.unsubscribe();
    for (const watch of this.#watches) watch.stop();
    await Promise.all(stopped);
    await this.#nc.drain().catch(() => {});
  }

  async #start() {
    this.#subscriptions.push(
      this.#nc.subscribe(this.#names.replica(this.replicaId, 'grant'), { callback: (_error, msg) => void this.#grants.received(msg) }),
      this.#nc.subscribe(this.#names.replica(this.replicaId, 'returned'), { callback: (_error, msg) => this.#grants.returned(msg) }),
      this.#nc.subscribe(this.#names.replica(this.replicaId, 'ping'), { callback: (_error, msg) => void msg.respond('ok') }),
      this.#nc.subscribe(this.#names.replica(this.replicaId, 'stalled'), { callback: (_error, msg) => this.#heads.get(msg.string())?.stalled(STALLED_MS) }),
      this.#nc.subscribe(this.#names.headLeaderElected, { callback: (_error, msg) => this.#headMoved(msg.subject) }),
    );
    // Heads first: a head loop started by a ready entry then knows the holder.
    await this.#follow('heads', () => this.#kvs.heads.watch(), (entry) => this.#headChanged(entry));
    await this.#follow('ready', () => this.#kvs.ready.watch(), (entry) => {
      if (entry.operation !== 'PUT') return this.#retired(entry.key);
      const instances = this.#readySet.opened(entry.key, entry.string());
      if (instances) this.#announce(entry.key, instances);
    });
    // Opened again, it shows the entries as they are: changes made while it was closed were not seen.
    await this.#follow('slots', (again) => this.#kvs.slots.watch({ include: again ? KvWatchInclude.LastValue : KvWatchInclude.UpdatesOnly }), (entry) => {
      this.#activity.set(entry.key, Date.now());
      this.#leases.changed(entry.key, entry);
    });
    this.#refresher = setInterval(() => void this.#refreshDepths(), DEPTH_REFRESH_MS);
    this.#refresher.unref();
    void (async () => {
      for await (const status of this.#nc.status()) if (status.type === 'reconnect') this.#resync();
    })();
  }

  /**
   * The connection came back, maybe to another server of a cluster: what was open with the old one (the
   * heads' pulls, the watches' consumers) may be gone, and nats.js would find out only after seconds of
   * missed heartbeats or a pull's expiry. Everything is opened afresh at once.
   */
  #resync() {
    for (const head of this.#heads.values()) head.pullAgain();
    for (const watch of this.#watches) watch.stop();
  }

  /**
   * A version's head consumer has a new leader: a pull made while it was being elected went nowhere, and
   * nats.js would pull again only when that one expires (30 s).
   */
  #headMoved(subject: string) {
    for (const [versionId, head] of this.#heads) if (subject.includes(`.${this.#names.queueStream(versionId)}.`)) head.pullAgain();
  }

  /** Follows a bucket for as long as the queue runs: a watch that ends is opened again, showing what is there. */
  async #follow(bucket: string, open: (again: boolean) => Promise<Watch>, seen: (entry: KvEntry) => void) {
    let watch = await open(false);
    void (async () => {
      for (;;) {
        this.#watches.add(watch);
        try {
          for await (const entry of watch) seen(entry);
        } catch (error) {
          this.#options.log.warn({ err: error, bucket }, 'bucket watch failed');
        } finally {
          this.#watches.delete(watch);
        }
        const opened = await this.#reopen(open);
        if (!opened) return;
        watch = opened;
      }
    })();
  }

  /** A watch opened again once the server lets it (a cluster may be electing the bucket's leader); none once closed. */
  async #reopen(open: (again: boolean) => Promise<Watch>): Promise<Watch | undefined> {
    for (let pause = 0; !this.#closed; pause = 250) {
      await new Promise((resolve) => setTimeout(resolve, pause));
      const opened = await open(true).catch(() => undefined);
      if (opened) return opened;
    }
    return undefined;
  }

  /**
   * The version's ready entry was deleted: placement deletes it with the version (its stream and keys go
   * too). Its instances are forgotten and nothing more is written for it here; its waiting requests move
   * on (service.ts). A deletion by anyone else only empties the set until placement's next round.
   */
  #retired(versionId: string) {
    this.#streams.forget(versionId);
    this.#depths.delete(versionId);
    this.#activity.delete(versionId);
    this.#announce(versionId, []);
    this.#readySet.forget(versionId);
    this.#leases.retire(versionId);
  }

  /** The watch of the heads bucket: a holder that sees another entry has lost the head; waiting loops look again. */
  #headChanged(entry: KvEntry) {
    const versionId = entry.key;
    if (entry.operation === 'PUT') this.#headEntries.set(versionId, { holder: entry.string(), revision: entry.revision });
    else this.#headEntries.delete(versionId);
    this.#heads.get(versionId)?.entryChanged(entry.revision);
  }

  /** Whether a replica is gone: its subjects have no responder (a slow answer is not a verdict). */
  async #isGone(replica: string): Promise<boolean> {
    try {
      await this.#nc.request(this.#names.replica(replica, 'ping'), '', { timeout: GRANT_TIMEOUT_MS });
      return false;
    } catch (error) {
      const gone = (error as RequestError).isNoResponders?.() === true;
      if (gone) this.#leases.gone(replica);
      return gone;
    }
  }

  /** A version's ready set from the watch: its slots follow it, and its head loop runs while it has instances. */
  #announce(versionId: string, instances: ReadyInstance[]) {
    if (instances.length) this.#leases.revive(versionId);
    this.#readySet.set(versionId, instances);
    this.#seen(versionId, instances);
    this.#leases.changed(versionId);
    const head = this.#heads.get(versionId);
    if (instances.length && !head) this.#heads.set(versionId, this.#versionHead(versionId));
    if (!instances.length && head) {
      void head.stop();
      this.#heads.delete(versionId);
    }
  }

  #versionHead(versionId: string): VersionHead {
    return new VersionHead(versionId, {
      replicaId: this.replicaId, js: this.#js, names: this.#names, streams: this.#streams, locks: this.#kvs.heads,
      leases: this.#leases, grants: this.#grants, log: this.#options.log,
      entry: (id) => this.#headEntries.get(id),
      isGone: (replica) => this.#isGone(replica),
      usable: (id) => this.#readySet.usable(id),
      took: (id, count) => this.#depths.set(id, Math.max(0, (this.#depths.get(id) ?? count) - count)),
    });
  }

  /**
   * While tickets of this replica wait for the version, its head loop looks again each HEAD_CHECK_MS
   * that one has waited that long (the holder may be gone), and from STALLED_MS on the holder is told
   * (its pull may be lost). One timer per version, only while waiting.
   */
  #checkHead(versionId: string, looked = false) {
    const oldest = this.#tickets.oldest(versionId);
    if (this.#headChecks.has(versionId) || oldest === undefined) return;
    const timer = setTimeout(() => {
      this.#headChecks.delete(versionId);
      const waitedLong = this.#tickets.has(versionId, HEAD_CHECK_MS);
      if (waitedLong) this.#heads.get(versionId)?.wake();
      if (this.#tickets.has(versionId, STALLED_MS)) this.#tellHolder(versionId);
      this.#checkHead(versionId, waitedLong);
    }, looked ? HEAD_CHECK_MS : Math.max(10, oldest + HEAD_CHECK_MS - Date.now()));
    timer.unref();
    this.#headChecks.set(versionId, timer);
  }

  /**
   * A ticket has waited long while the head's holder answers: a pull made while the cluster was electing
   * the head consumer's leader can stay unanswered until it expires (30 s), and neither end would know.
   */
  #tellHolder(versionId: string) {
    // This replica may hold the head without knowing it from the watch (being opened again after a failover).
    this.#heads.get(versionId)?.stalled(STALLED_MS);
    const holder = this.#headEntries.get(versionId)?.holder;
    if (holder && holder !== this.replicaId) this.#nc.publish(this.#names.replica(holder, 'stalled'), versionId);
  }

  /**
   * The grant a request runs with here: its slot goes back when it is done (to the replica that lent it,
   * or to this one's leases); a failed instance is benched.
   */
  #grant(lease: Lease): Grant {
    return grantOnce(lease.instance, (outcome) => {
      if (outcome === 'failed') this.#readySet.bench(lease.instance.instanceId);
      if (lease.lender) void this.#grants.giveBack(lease);
      else void this.#leases.release(lease).catch((error) => this.#options.log.warn({ err: error }, 'could not release a slot lease; it expires'));
    });
  }

  /** Depths of the versions someone invokes (tickets of its own, held, counted, or slots changing): none while all idle. */
  async #refreshDepths() {
    const now = Date.now();
    const active = this.#tickets.versions();
    for (const [versionId, head] of this.#heads) if (head.held) active.add(versionId);
    for (const [versionId, depth] of this.#depths) if (depth > 0) active.add(versionId);
    for (const [versionId, at] of this.#activity) if (now - at < ACTIVE_MS) active.add(versionId);
    for (const versionId of active) {
      const depth = await this.#streams.depth(versionId);
      if (depth !== undefined) this.#depths.set(versionId, depth);
      else this.#depths.delete(versionId);
    }
  }
}
