// The InvocationQueue for several API replicas on one store (docs/architecture.md, "Several API replicas").
// The replica a client reached keeps its connection and the request body, and itself sends the request
// to the instance. NATS JetStream decides the order and the slot:
// - a ticket {id, replica} per waiting request in the version's work-queue stream (FIFO; max_msgs is the
//   queue limit, so a full queue is refused by the broker for every replica at once);
// - one durable consumer per version, pulled only by the replica holding the version's head (head-lock.ts;
//   another replica takes it over when it has waited for a grant and finds the holder gone):
//   it takes up to HEAD_WINDOW tickets in order, their slot leases in one write (leases.ts), sends the
//   grants together in order to the tickets' replicas over NATS request/reply, and acks; a ticket whose
//   replica is gone is adopted when its request is a stored 202 (at most once, by a conditional claim in
//   the store), else dropped (its client went with the replica);
// - a request that finds nothing of its version waiting and a slot free (leases.ts) takes it at once, on
//   any replica, and never becomes a ticket;
// - ready instances are published by the placement replica in the KV bucket <prefix>_ready and watched by
//   all; they and the grants are signed (replica-signing.ts), and one whose signature does not verify is
//   dropped. Every name on the server starts with the installation's prefix (nats.ts);
// - an idle version costs no message: the buckets are watched, nothing is polled; the placement replica
//   deletes a version's stream and keys once placement no longer knows it (retain).
import { randomUUID } from 'node:crypto';
import { nanos, type Msg, type NatsConnection, type RequestError, type Subscription } from '@nats-io/transport-node';
import {
  AckPolicy, DiscardPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType,
  type JetStreamClient, type JetStreamManager, type JsMsg,
} from '@nats-io/jetstream';
import { Kvm, KvWatchInclude, type KV, type KvEntry } from '@nats-io/kv';
import { z } from 'zod';
import { endpointSchema } from '../compute/protocol.ts';
import type { ReadyInstance } from '../control/instances/service.ts';
import { Problem } from '../domain/problem.ts';
import type { Logger } from '../logger.ts';
import type { Invocation } from './invocation.ts';
import { HeadLock, type HeadEntry } from './head-lock.ts';
import { SlotLeases, type Lease } from './leases.ts';
import { connectNats, named, natsNames, type NatsNames, type NatsServer } from './nats.ts';
import { grantOnce, type Grant, type SharedQueue } from './queue.ts';
import type { ReplicaSigner } from './replica-signing.ts';

const ACK_WAIT_MS = 10_000;
const GRANT_TIMEOUT_MS = 2_000;
/** A replica that answers no grant in this many tries (connected but stuck) counts as gone. */
const GRANT_ATTEMPTS = 5;
/** Grants taken, remembered so a grant asked again (its answer was lost or late) is answered the same. */
const TAKEN_REMEMBERED = 10_000;
const DEPTH_REFRESH_MS = 1_000;
/** A version's depth is read again while its slots changed this recently (someone invokes it). */
const ACTIVE_MS = 5_000;
/** Tickets the head holder takes ahead: granted in order, as slots allow. */
const HEAD_WINDOW = 256;
/** A ticket of this replica waiting this long sends it to see whether the head's holder still answers. */
const HEAD_CHECK_MS = 300;
/** Function version ids (control/functions: random UUIDs). */
const VERSION_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** How the head consumer of every version's stream is made. */
const HEAD_CONSUMER = { durable_name: 'head', ack_policy: AckPolicy.Explicit, max_ack_pending: HEAD_WINDOW, ack_wait: nanos(ACK_WAIT_MS), max_deliver: -1 };

const ticketSchema = z.object({ id: z.string(), replica: z.string() });
type Ticket = z.infer<typeof ticketSchema>;
const readyInstanceSchema = z.object({
  instanceId: z.string(), versionId: z.string(), clusterId: z.string(), maxRequestConcurrency: z.number().int(), gpu: z.string(), instanceType: z.string(),
  backend: z.string(), region: z.string(),
  endpoint: endpointSchema,
});
const readySchema = z.array(readyInstanceSchema);
const grantSchema = z.object({ id: z.string(), lease: z.object({ id: z.string(), versionId: z.string(), instance: readyInstanceSchema }) });

export interface JetStreamQueueOptions {
  nats: NatsServer;
  /** Signs and checks what replicas tell each other about where requests go. */
  signer: ReplicaSigner;
  maxDepth: number;
  log: Logger;
  /** A stored 202 whose replica is gone, claimed to run here (granted its slot next); undefined when it is not claimable. */
  adopt(requestId: string): Promise<Invocation | undefined>;
}

/** What a signature is about: a version's ready instances, a grant to one replica. */
const readyContext = (versionId: string) => `ready ${versionId}`;
const grantContext = (replica: string) => `grant ${replica}`;

/** The loop waiting for the head ticket of one version, on every replica that knows instances of it. */
interface Head {
  stopped: boolean;
  done: Promise<void>;
  stop(): void;
  /** Wakes the loop for a chance at the head (the entry changed, or a ticket waits long); kept if it is busy. */
  wake(): void;
  /** Woken while it was not waiting: its next wait ends at once. */
  woken: boolean;
}

export class JetStreamQueue implements SharedQueue {
  readonly replicaId = `replica-${randomUUID().slice(0, 8)}`;
  readonly #nc: NatsConnection;
  readonly #js: JetStreamClient;
  readonly #jsm: JetStreamManager;
  readonly #ready: KV;
  readonly #slots: KV;
  readonly #headLocks: KV;
  readonly #leases: SlotLeases;
  readonly #options: JetStreamQueueOptions;
  readonly #names: NatsNames;
  /** This replica's requests with a ticket (since when), until granted or removed. */
  readonly #waiting = new Map<string, { invocation: Invocation; seq: number; since: number }>();
  /** Request id → the lease it was granted with (the latest TAKEN_REMEMBERED). */
  readonly #taken = new Map<string, string>();
  /** Request id → the write counting its granted slot here, until done. */
  readonly #counting = new Map<string, Promise<void>>();
  readonly #instances = new Map<string, ReadyInstance[]>();
  /** Instances that failed a connection here, left out until placement announces a new set. */
  readonly #benched = new Set<string>();
  readonly #heads = new Map<string, Head>();
  /** Each version's head entry as the watch last showed it. */
  readonly #headEntries = new Map<string, HeadEntry>();
  /** Versions whose tickets here are looked at again soon (#checkHead). */
  readonly #headChecks = new Map<string, NodeJS.Timeout>();
  /** The head locks this replica holds. */
  readonly #locks = new Map<string, HeadLock>();
  /** What placement (on this replica) last published per version, as the watch decodes it. */
  readonly #published = new Map<string, string>();
  /** Versions the placement replica knows to have a stream or keys here (deleted once placement forgets them). */
  #known: Set<string> | undefined;
  /** Copies of each queue stream: natsReplicas, or what the server keeps. */
  #copies = 1;
  /** Rounds' retains, one after the other. */
  #retaining = Promise.resolve();
  /** Version → when its slots entry last changed (someone invokes it). */
  readonly #activity = new Map<string, number>();
  /** The tickets held per version whose head this replica holds, waiting for slots. */
  readonly #holding = new Map<string, JsMsg[]>();
  readonly #streams = new Map<string, Promise<void>>();
  readonly #depths = new Map<string, number>();
  readonly #subscriptions: Subscription[] = [];
  #seen: (versionId: string, instances: ReadyInstance[]) => void = () => {};
  #refresher: NodeJS.Timeout | undefined;

  private constructor(nc: NatsConnection, jsm: JetStreamManager, kvs: { ready: KV; slots: KV; heads: KV }, options: JetStreamQueueOptions) {
    this.#nc = nc;
    this.#js = jetstream(nc);
    this.#jsm = jsm;
    this.#ready = kvs.ready;
    this.#slots = kvs.slots;
    this.#headLocks = kvs.heads;
    this.#leases = new SlotLeases(kvs.slots, this.replicaId, (replica) => this.#isGone(replica));
    this.#options = options;
    this.#names = natsNames(options.nats.natsPrefix);
  }

  /** Connects, or fails with one line naming the URL or the setting at fault. */
  static async connect(options: JetStreamQueueOptions): Promise<JetStreamQueue> {
    const { natsUrl, natsPrefix, natsTlsInsecure } = options.nats;
    // noAsyncTraces: no stack captured per request (an Error each), which cost more than the request itself.
    const nc = await connectNats(options.nats, { maxReconnectAttempts: -1, noAsyncTraces: true });
    if (natsTlsInsecure) options.log.warn({ natsUrl }, 'NATS server certificate not verified (invocation.natsTlsInsecure): for development only');
    try {
      const jsm = await jetstreamManager(nc);
      const { bucket } = natsNames(natsPrefix);
      const { natsReplicas } = options.nats;
      const buckets = await Promise.all([bucket('ready'), bucket('slots'), bucket('heads')].map((name) => openBucket(nc, jsm, name, natsReplicas)));
      const [ready, slots, heads] = buckets.map(({ kv }) => kv);
      const kept = Math.min(...buckets.map((opened) => opened.kept));
      if (kept < natsReplicas) options.log.warn({ natsUrl }, `${named('natsReplicas')} is ${natsReplicas}, but the server keeps ${kept} (a single server is no cluster)`);
      const queue = new JetStreamQueue(nc, jsm, { ready, slots, heads }, options);
      queue.#copies = kept;
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
    if (await this.#runAtOnce(invocation)) return;
    await this.#stream(versionId);
    // Waiting before the ticket exists: its grant may come back before the broker's ack does.
    const waiting = { invocation, seq: 0, since: Date.now() };
    this.#waiting.set(invocation.id, waiting);
    try {
      waiting.seq = (await this.#js.publish(this.#names.queueSubject(versionId), JSON.stringify({ id: invocation.id, replica: this.replicaId }))).seq;
      this.#checkHead(versionId);
      this.#depths.set(versionId, (this.#depths.get(versionId) ?? 0) + 1);
      // Its client left while the ticket was being written: the ticket goes too.
      if (invocation.cancelled && this.#waiting.get(invocation.id) !== waiting) this.#deleteTicket(versionId, waiting.seq);
    } catch (error) {
      this.#waiting.delete(invocation.id);
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
    const held = this.#holding.get(versionId);
    if (held ? held.length > 0 : this.#hasTicket(versionId)) return false;
    const lease = await this.#leases.tryAcquire(versionId, () => this.#usable(versionId));
    if (lease) invocation.grant(this.#grant(lease));
    return lease !== undefined;
  }

  /** Whether a ticket of this replica waits for the version (for at least `ms`). */
  #hasTicket(versionId: string, ms = 0): boolean {
    const oldest = this.#oldestTicket(versionId);
    return oldest !== undefined && oldest <= Date.now() - ms;
  }

  /** It held the head already: it takes the next slot directly instead of a new ticket at the tail. */
  requeue(invocation: Invocation) {
    void this.#leases.acquire(invocation.versionId, () => this.#usable(invocation.versionId), () => this.#closed)
      .then((lease) => lease && invocation.grant(this.#grant(lease)))
      .catch((error) => this.#options.log.error({ reqId: invocation.id, err: error }, 'a request queued again could not take a slot'));
  }

  remove(invocation: Invocation): boolean {
    const waiting = this.#waiting.get(invocation.id);
    if (!waiting) return false;
    this.#waiting.delete(invocation.id);
    if (waiting.seq) this.#deleteTicket(invocation.versionId, waiting.seq);
    return true;
  }

  #deleteTicket(versionId: string, seq: number) {
    void this.#jsm.streams.deleteMessage(this.#names.queueStream(versionId), seq, false).catch(() => {});
  }

  async position(invocation: Invocation): Promise<number | undefined> {
    const waiting = this.#waiting.get(invocation.id);
    if (!waiting) return undefined;
    const { state } = await this.#jsm.streams.info(this.#names.queueStream(invocation.versionId));
    return Math.max(1, waiting.seq - state.first_seq + 1);
  }

  depth(versionId: string): number {
    return this.#depths.get(versionId) ?? 0;
  }

  /**
   * From placement (on the replica that runs it): published for every replica when it differs from what
   * was published last (compared as the watch decodes it, so an unchanged set is never written again).
   */
  ready(versionId: string, instances: ReadyInstance[]) {
    const parsed = readySchema.safeParse(instances);
    const decoded = JSON.stringify(parsed.success ? parsed.data : instances);
    if ((this.#published.get(versionId) ?? JSON.stringify(this.#instances.get(versionId) ?? [])) === decoded) return;
    this.#published.set(versionId, decoded);
    void this.#ready.put(versionId, this.#options.signer.sign(readyContext(versionId), instances)).catch((error) => {
      this.#published.delete(versionId);
      this.#options.log.warn({ err: error, versionId }, 'could not publish ready instances');
    });
  }

  /**
   * From placement after each round (on the replica that runs it): the versions it still knows. Every
   * other version's stream and keys are deleted; the first time, those left on the server are found.
   */
  retain(versionIds: ReadonlySet<string>): Promise<void> {
    this.#retaining = this.#retaining.then(async () => {
      this.#known ??= await this.#onServer();
      for (const versionId of versionIds) this.#known.add(versionId);
      for (const versionId of [...this.#known].filter((known) => !versionIds.has(known))) {
        this.#known.delete(versionId);
        await this.#deleteVersion(versionId);
      }
    }).catch((error) => this.#options.log.warn({ err: error }, 'could not delete the queues and keys of versions no longer deployed'));
    return this.#retaining;
  }

  /** Versions with a queue stream or an entry in the buckets. */
  async #onServer(): Promise<Set<string>> {
    const versions = new Set<string>();
    const streamPrefix = this.#names.queueStream('');
    for await (const name of this.#jsm.streams.names()) {
      // Only a version id after the prefix: another installation's prefix may start like ours.
      const versionId = name.slice(streamPrefix.length);
      if (name.startsWith(streamPrefix) && VERSION_ID.test(versionId)) versions.add(versionId);
    }
    for (const kv of [this.#ready, this.#slots, this.#headLocks]) for await (const key of await kv.keys()) versions.add(key);
    return versions;
  }

  /** The ready entry first (every replica lets the version go when it sees it deleted), then the rest. */
  async #deleteVersion(versionId: string) {
    this.#options.log.info({ versionId }, 'version no longer deployed: its queue and keys are deleted');
    await this.#ready.delete(versionId);
    await Promise.all([this.#slots.delete(versionId), this.#headLocks.delete(versionId)]);
    await this.#jsm.streams.delete(this.#names.queueStream(versionId)).catch((error: Error) => {
      if (error.name !== 'StreamNotFoundError' && !/stream not found/i.test(error.message)) throw error;
    });
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

  #closed = false;

  async close() {
    this.#closed = true;
    clearInterval(this.#refresher);
    for (const timer of this.#headChecks.values()) clearTimeout(timer);
    for (const head of this.#heads.values()) {
      head.stopped = true;
      head.stop();
    }
    this.#leases.close();
    for (const subscription of this.#subscriptions) subscription.unsubscribe();
    await Promise.all([...this.#heads.values()].map((head) => head.done));
    await this.#nc.drain().catch(() => {});
  }

  async #start() {
    this.#subscriptions.push(
      this.#nc.subscribe(this.#names.replica(this.replicaId, 'grant'), { callback: (_error, msg) => void this.#granted(msg) }),
      this.#nc.subscribe(this.#names.replica(this.replicaId, 'ping'), { callback: (_error, msg) => void msg.respond('ok') }),
    );
    // Heads first: a head loop started by a ready entry then knows the holder.
    const headWatch = await this.#headLocks.watch();
    void (async () => {
      for await (const entry of headWatch) this.#headChanged(entry);
    })();
    const watch = await this.#ready.watch();
    void (async () => {
      for await (const entry of watch) {
        if (entry.operation !== 'PUT') {
          this.#retired(entry.key);
          continue;
        }
        const instances = this.#readyOf(entry.key, entry.string());
        if (instances) this.#announce(entry.key, instances);
        // Not placement's: placement writes its own again with its next round.
        else this.#published.delete(entry.key);
      }
    })();
    const slotWatch = await this.#slots.watch({ include: KvWatchInclude.UpdatesOnly });
    void (async () => {
      for await (const entry of slotWatch) {
        this.#activity.set(entry.key, Date.now());
        this.#leases.changed(entry.key, entry);
      }
    })();
    this.#refresher = setInterval(() => void this.#refreshDepths(), DEPTH_REFRESH_MS);
    this.#refresher.unref();
  }

  /**
   * The instances placement announced for a version; undefined (logged) for an entry placement did not
   * sign: the last good one stays.
   */
  #readyOf(versionId: string, signed: string): ReadyInstance[] | undefined {
    const opened = this.#options.signer.open(readyContext(versionId), signed);
    const parsed = opened && readySchema.safeParse(opened.value);
    if (parsed?.success) return parsed.data;
    this.#options.log.warn({ versionId, bucket: this.#names.bucket('ready') }, `ready instances ${opened ? 'signed but do not decode' : 'not signed by placement'}; ignored`);
    return undefined;
  }

  /**
   * The version's ready entry was deleted: placement deletes it with the version (its stream and keys go
   * too). Its instances are forgotten and nothing more is written for it here; its waiting requests move
   * on (service.ts). A deletion by anyone else only empties the set until placement's next round.
   */
  #retired(versionId: string) {
    this.#published.delete(versionId);
    this.#streams.delete(versionId);
    this.#depths.delete(versionId);
    this.#activity.delete(versionId);
    this.#announce(versionId, []);
    this.#instances.delete(versionId);
    this.#leases.retire(versionId);
  }

  /** The watch of the heads bucket: a holder that sees another entry has lost the head; waiting loops look again. */
  #headChanged(entry: KvEntry) {
    const versionId = entry.key;
    if (entry.operation === 'PUT') this.#headEntries.set(versionId, { holder: entry.string(), revision: entry.revision });
    else this.#headEntries.delete(versionId);
    // Only a later entry: the deletion of the entry taken over may be seen after the take.
    const lock = this.#locks.get(versionId);
    if (lock && entry.revision > lock.revision) lock.lose();
    this.#heads.get(versionId)?.wake();
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

  #announce(versionId: string, instances: ReadyInstance[]) {
    if (instances.length) this.#leases.revive(versionId);
    this.#instances.set(versionId, instances);
    for (const instance of instances) this.#benched.delete(instance.instanceId);
    this.#seen(versionId, instances);
    this.#leases.changed(versionId);
    const head = this.#heads.get(versionId);
    if (instances.length && !head) this.#heads.set(versionId, this.#headLoop(versionId));
    if (!instances.length && head) {
      head.stopped = true;
      head.stop();
      this.#heads.delete(versionId);
    }
  }

  #usable(versionId: string): ReadyInstance[] {
    return (this.#instances.get(versionId) ?? []).filter((instance) => !this.#benched.has(instance.instanceId));
  }

  /** The version's stream and head consumer, created once by whichever replica needs them first. */
  #stream(versionId: string): Promise<void> {
    let made = this.#streams.get(versionId);
    if (!made) {
      made = this.#makeStream(versionId);
      made.catch(() => this.#streams.delete(versionId));
      this.#streams.set(versionId, made);
    }
    return made;
  }

  async #makeStream(versionId: string) {
    const name = this.#names.queueStream(versionId);
    const stream = {
      name, subjects: [this.#names.queueSubject(versionId)], retention: RetentionPolicy.Workqueue, storage: StorageType.File,
      max_msgs: this.#options.maxDepth, discard: DiscardPolicy.New,
    };
    // Every replica that sees the version ready gets here; one that made it between our look and our add
    // (perhaps with its own maxDepth during a rolling change) made the stream the version keeps.
    const replicas = this.#copies;
    const info = await this.#jsm.streams.info(name).catch(() => undefined);
    if (!info) await this.#jsm.streams.add({ ...stream, num_replicas: replicas }).catch((error) => this.#jsm.streams.info(name).catch(() => { throw error; }));
    else if (info.config.num_replicas !== replicas) await this.#jsm.streams.update(name, { ...info.config, num_replicas: replicas });
    // A stream made before the head lock has its consumer at max_ack_pending 1: raised in place.
    await this.#jsm.consumers.add(name, HEAD_CONSUMER).catch(() => this.#jsm.consumers.update(name, 'head', { max_ack_pending: HEAD_WINDOW }));
  }

  /**
   * The head's previous holder is gone with tickets it had taken (unacked until their ack wait): the
   * consumer is made anew, so they come again at once, in order.
   */
  async #resetHead(versionId: string) {
    const name = this.#names.queueStream(versionId);
    await this.#jsm.consumers.delete(name, 'head').catch(() => false);
    await this.#jsm.consumers.add(name, HEAD_CONSUMER);
  }

  /**
   * Tries for the version's head until stopped; while holding it, serves its tickets. Between tries it
   * waits for the head's entry to change, or for a ticket of its own that waited HEAD_CHECK_MS (the holder
   * may be gone): no message while the version idles.
   */
  #headLoop(versionId: string): Head {
    const head: Head = { stopped: false, done: Promise.resolve(), stop: () => {}, wake: () => (head.woken = true), woken: false };
    head.done = (async () => {
      while (!head.stopped) {
        try {
          await this.#stream(versionId);
          const lock = await HeadLock.take(this.#headLocks, versionId, this.replicaId, this.#headEntries.get(versionId), (replica) => this.#isGone(replica));
          if (lock) {
            this.#locks.set(versionId, lock);
            if (lock.tookOver) await this.#resetHead(versionId);
            await this.#holdHead(versionId, lock, head).finally(() => {
              this.#locks.delete(versionId);
              return lock.release();
            });
          } else await this.#headChance(head);
        } catch (error) {
          if (head.stopped) break;
          this.#options.log.warn({ err: error, versionId }, 'invocation queue head failed; retrying');
          await new Promise((resolve) => setTimeout(resolve, 500));
        }
      }
    })();
    return head;
  }

  /** Until the head's entry changes or a ticket here waited HEAD_CHECK_MS (#checkHead). */
  #headChance(head: Head): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        head.wake = () => (head.woken = true);
        resolve();
      };
      head.stop = done;
      head.wake = done;
      if (head.stopped || head.woken) done();
      head.woken = false;
    });
  }

  /**
   * While tickets of this replica wait for the version, its head loop looks again each HEAD_CHECK_MS
   * that one has waited that long (the holder may be gone). One timer per version, only while waiting.
   */
  #checkHead(versionId: string, looked = false) {
    const oldest = this.#oldestTicket(versionId);
    if (this.#headChecks.has(versionId) || oldest === undefined) return;
    const timer = setTimeout(() => {
      this.#headChecks.delete(versionId);
      const waitedLong = this.#hasTicket(versionId, HEAD_CHECK_MS);
      if (waitedLong) this.#heads.get(versionId)?.wake();
      this.#checkHead(versionId, waitedLong);
    }, looked ? HEAD_CHECK_MS : Math.max(10, oldest + HEAD_CHECK_MS - Date.now()));
    timer.unref();
    this.#headChecks.set(versionId, timer);
  }

  /** When the longest waiting ticket of this replica for the version was made; undefined with none. */
  #oldestTicket(versionId: string): number | undefined {
    let oldest = Infinity;
    for (const { invocation, since } of this.#waiting.values()) if (invocation.versionId === versionId) oldest = Math.min(oldest, since);
    return oldest === Infinity ? undefined : oldest;
  }

  /** Pulls the version's tickets while this replica holds its head; what it could not grant goes back. */
  async #holdHead(versionId: string, lock: HeadLock, head: Head) {
    const consumer = await this.#js.consumers.get(this.#names.queueStream(versionId), 'head');
    const tickets = await consumer.consume({ max_messages: HEAD_WINDOW });
    const held: JsMsg[] = [];
    this.#holding.set(versionId, held);
    let arrived = () => {};
    let ended = false;
    const stop = () => {
      tickets.stop();
      arrived();
    };
    head.stop = stop;
    lock.onLost(stop);
    const stopped = () => head.stopped || lock.lost || ended;
    if (head.stopped) stop();
    const pulling = (async () => {
      for await (const msg of tickets) {
        held.push(msg);
        arrived();
      }
      ended = true;
      arrived();
    })();
    // Held tickets stay this replica's while they wait for slots.
    const keepAlive = setInterval(() => held.forEach((msg) => msg.working()), ACK_WAIT_MS / 3);
    try {
      while (!stopped()) {
        if (held.length) {
          await this.#grantHeld(versionId, held, stopped);
          continue;
        }
        // Nothing held: the other replicas need no longer give way (#grantHeld says when they must).
        this.#leases.wait(versionId, false);
        await new Promise<void>((resolve) => (arrived = resolve));
      }
    } finally {
      this.#leases.wait(versionId, false);
      this.#holding.delete(versionId);
      clearInterval(keepAlive);
      await pulling;
      for (const msg of held.splice(0)) msg.nak();
    }
  }

  /**
   * Slots for as many held tickets as there is room, in one write; each granted in order, then all acked
   * together (one write to NATS). A ticket stays in `held` (kept alive) until acked.
   */
  async #grantHeld(versionId: string, held: JsMsg[], stopped: () => boolean) {
    // No room for every ticket held: the other replicas give way until none is held (#holdHead).
    const full = () => this.#leases.wait(versionId, true);
    const leases = await this.#leases.acquireMany(versionId, held.length, () => this.#usable(versionId), stopped, full) ?? [];
    const tickets = leases.map((_, index) => ticketSchema.safeParse(held[index].json()));
    const delivered = await this.#deliverInOrder(tickets.map((ticket, index) => ticket.success && { ticket: ticket.data, lease: leases[index] }));
    await Promise.all(leases.filter((_, index) => !delivered[index]).map((lease) => this.#leases.release(lease)));
    for (const [index, msg] of held.splice(0, tickets.length).entries()) {
      if (tickets[index].success) msg.ack();
      else msg.term('not a ticket');
    }
    this.#depths.set(versionId, Math.max(0, (this.#depths.get(versionId) ?? tickets.length) - tickets.length));
  }

  /**
   * Grants in ticket order without one round trip each: grants to other replicas go out together (NATS keeps
   * their order on this connection), and one of this replica's own runs once every grant before it is taken.
   */
  #deliverInOrder(grants: ({ ticket: Ticket; lease: Lease } | false)[]): Promise<boolean[]> {
    let before: Promise<unknown> = Promise.resolve();
    return Promise.all(grants.map((grant) => {
      if (!grant) return false;
      const delivered = grant.ticket.replica === this.replicaId
        ? before.then(() => this.#take(grant.ticket.id, grant.lease))
        : this.#deliver(grant.ticket, grant.lease);
      before = Promise.all([before, delivered]);
      return delivered;
    }));
  }

  /**
   * True once the ticket's request runs with the lease on its replica (or here, adopted). A replica that
   * is slow to answer is asked again (a grant is answered the same way twice); one with no responder is gone.
   */
  async #deliver(ticket: Ticket, lease: Lease): Promise<boolean> {
    const grant = this.#options.signer.sign(grantContext(ticket.replica), { id: ticket.id, lease });
    for (let asked = 1; ; asked++) {
      try {
        const reply = await this.#nc.request(this.#names.replica(ticket.replica, 'grant'), grant, { timeout: GRANT_TIMEOUT_MS });
        if (reply.string() !== 'taken') return false;
        void this.#leases.handOver(lease).catch((error) => this.#options.log.warn({ err: error }, 'could not write a slot handed over; the next write of this replica lets it go'));
        return true;
      } catch (error) {
        if (!(error as RequestError).isNoResponders?.() && asked < GRANT_ATTEMPTS) continue;
      }
      // Its replica is gone: a stored 202 runs here (claimed at most once); a synchronous request went with it.
      const adopted = await this.#options.adopt(ticket.id).catch(() => undefined);
      adopted?.grant(this.#grant(lease));
      return adopted !== undefined;
    }
  }

  #take(requestId: string, lease: Lease): boolean {
    if (this.#taken.get(requestId) === lease.id) return true;
    const waiting = this.#waiting.get(requestId);
    if (!waiting) return false;
    this.#waiting.delete(requestId);
    this.#taken.set(requestId, lease.id);
    if (this.#taken.size > TAKEN_REMEMBERED) this.#taken.delete(this.#taken.keys().next().value!);
    waiting.invocation.grant(this.#grant(lease));
    return true;
  }

  /** Another replica holds the head and grants one of ours; a grant it did not sign is refused. */
  #granted(msg: Msg) {
    const opened = this.#options.signer.open(grantContext(this.replicaId), msg.string());
    const parsed = opened && grantSchema.safeParse(opened.value);
    if (!parsed?.success) {
      this.#options.log.warn({ subject: msg.subject }, `a grant ${opened ? 'that does not decode' : 'not signed by a replica'}; refused`);
      return msg.respond('gone');
    }
    const { id, lease } = parsed.data;
    const again = this.#taken.get(id) === lease.id;
    if (!this.#take(id, lease)) return msg.respond('gone');
    // Counted here before the granting replica stops counting it: the slot never counts nowhere. A grant
    // asked again is answered once that write is done too.
    if (!again) {
      const counted = this.#leases.hold(lease).catch((error: unknown) => {
        this.#options.log.warn({ err: error }, 'could not write a granted slot; the next write of this replica counts it');
      }).finally(() => this.#counting.delete(id));
      this.#counting.set(id, counted);
    }
    void (this.#counting.get(id) ?? Promise.resolve()).then(() => msg.respond('taken'));
  }

  #grant(lease: Lease): Grant {
    return grantOnce(lease.instance, (outcome) => {
      if (outcome === 'failed') this.#benched.add(lease.instance.instanceId);
      void this.#leases.release(lease).catch((error) => this.#options.log.warn({ err: error }, 'could not release a slot lease; it expires'));
    });
  }

  /** Depths of the versions someone invokes (tickets of its own, held, counted, or slots changing): none while all idle. */
  async #refreshDepths() {
    const now = Date.now();
    const active = new Set([...this.#waiting.values()].map((waiting) => waiting.invocation.versionId));
    for (const [versionId, held] of this.#holding) if (held.length) active.add(versionId);
    for (const [versionId, depth] of this.#depths) if (depth > 0) active.add(versionId);
    for (const [versionId, at] of this.#activity) if (now - at < ACTIVE_MS) active.add(versionId);
    for (const versionId of active) {
      const info = await this.#jsm.streams.info(this.#names.queueStream(versionId)).catch(() => undefined);
      if (info) this.#depths.set(versionId, info.state.messages);
      else this.#depths.delete(versionId);
    }
  }
}

/**
 * A KV bucket of the platform, made with `replicas` copies or bound as it is; one made by an older release
 * (the heads bucket's entries expired then) or with another count of copies is brought in line. With the
 * count of copies the server keeps (a single server keeps one, whatever is asked).
 */
async function openBucket(nc: NatsConnection, jsm: JetStreamManager, name: string, replicas: number): Promise<{ kv: KV; kept: number }> {
  const kvm = new Kvm(nc);
  // A single server refuses a bucket of more than one copy: it is made with one there.
  const kv = await kvm.create(name, { history: 1, replicas }).catch((error: Error) => {
    if (!/non-clustered/i.test(error.message)) throw error;
    return kvm.create(name, { history: 1, replicas: 1 });
  });
  const stream = `KV_${name}`;
  let info = await jsm.streams.info(stream);
  const wanted = info.cluster ? replicas : 1;
  if (info.config.num_replicas !== wanted || info.config.max_age !== 0) info = await jsm.streams.update(stream, { ...info.config, num_replicas: wanted, max_age: 0 });
  return { kv, kept: info.cluster ? info.config.num_replicas : 1 };
}
