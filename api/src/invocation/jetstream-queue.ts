// The InvocationQueue for several API replicas on one store (docs/architecture.md, "Several API replicas").
// The replica a client reached keeps its connection, the request body and its place in line, and itself
// sends the request to the instance. NATS decides only the slots:
// - each replica's waiting requests of a version wait there, in order (version-queue.ts);
// - the slots of a version's instances are counted in one KV entry, a record per replica, written by
//   compare-and-set (leases.ts): two replicas never take the same last slot. A slot whose request is done
//   serves the next request waiting on the same replica with no write, while that replica runs no more
//   than its fair share: the slots are shared in proportion to the requests at each replica;
// - ready instances are published by the placement replica and watched by all (ready-set.ts), signed
//   (replica-signing.ts). Every name on the server starts with the installation's prefix (nats.ts);
// - an idle version costs no message: the buckets are watched, nothing is polled; the placement replica
//   deletes a version's keys once placement no longer knows it (retain).
import { randomUUID } from 'node:crypto';
import type { NatsConnection, RequestError, Subscription } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { KvWatchInclude, type KV, type KvEntry } from '@nats-io/kv';
import type { ReadyInstance } from '../control/instances/service.ts';
import { Problem } from '../domain/problem.ts';
import type { Logger } from '../logger.ts';
import type { Invocation } from './invocation.ts';
import { SlotLeases } from './leases.ts';
import { outlastingFailover } from './failover.ts';
import { connectNats, named, natsNames, openBucket, type NatsNames, type NatsServer } from './nats.ts';
import type { SharedQueue } from './queue.ts';
import { ReadySet } from './ready-set.ts';
import type { ReplicaSigner } from './replica-signing.ts';
import { VersionQueue, type VersionQueueContext } from './version-queue.ts';

/** How long a replica that is asked whether it still answers has to answer. */
const PING_TIMEOUT_MS = 2_000;

export interface JetStreamQueueOptions {
  nats: NatsServer;
  /** Signs and checks what replicas tell each other about where requests go. */
  signer: ReplicaSigner;
  maxDepth: number;
  log: Logger;
}

/** A bucket's watch: its entries as they change, until stopped. */
type Watch = AsyncIterable<KvEntry> & { stop(): void };

export class JetStreamQueue implements SharedQueue {
  readonly replicaId = `replica-${randomUUID().slice(0, 8)}`;
  readonly #nc: NatsConnection;
  readonly #kvs: { ready: KV; slots: KV };
  readonly #readySet: ReadySet;
  readonly #leases: SlotLeases;
  readonly #options: JetStreamQueueOptions;
  readonly #names: NatsNames;
  /** The requests waiting here, per version. */
  readonly #waiting = new Map<string, VersionQueue>();
  /** What every version's queue takes slots from. */
  readonly #versionContext: VersionQueueContext;
  /** The buckets' watches open now (#follow). */
  readonly #watches = new Set<Watch>();
  /** Versions the placement replica knows to have keys here (deleted once placement forgets them). */
  #known: Set<string> | undefined;
  /** Rounds' retains, one after the other. */
  #retaining = Promise.resolve();
  readonly #subscriptions: Subscription[] = [];
  #seen: (versionId: string, instances: ReadyInstance[]) => void = () => {};
  #closed = false;

  private constructor(nc: NatsConnection, kvs: { ready: KV; slots: KV }, options: JetStreamQueueOptions) {
    this.#nc = nc;
    this.#kvs = kvs;
    this.#options = options;
    this.#names = natsNames(options.nats.natsPrefix);
    this.#readySet = new ReadySet(kvs.ready, options.signer, options.log, this.#names);
    this.#leases = new SlotLeases(kvs.slots, this.replicaId, (replica) => this.#isGone(replica));
    this.#versionContext = {
      leases: this.#leases, log: options.log,
      usable: (versionId) => this.#readySet.usable(versionId),
      bench: (instanceId) => this.#readySet.bench(instanceId),
    };
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
      const buckets = await Promise.all([names.bucket('ready'), names.bucket('slots')].map((name) => openBucket(nc, jsm, name, natsReplicas)));
      const [ready, slots] = buckets.map(({ kv }) => outlastingFailover(kv));
      const kept = Math.min(...buckets.map((opened) => opened.kept));
      if (kept < natsReplicas) options.log.warn({ natsUrl }, `${named('natsReplicas')} is ${natsReplicas}, but the server keeps ${kept} (a single server is no cluster)`);
      await deleteTicketQueues(jsm, names);
      const queue = new JetStreamQueue(nc, { ready, slots }, options);
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

  /** Told every set from now on, and at once those the watch showed before (at start, before anyone asked). */
  onInstances(seen: (versionId: string, instances: ReadyInstance[]) => void) {
    this.#seen = seen;
    for (const [versionId, instances] of this.#readySet.announced()) seen(versionId, instances);
  }

  /** At the tail of the version's requests here; refused when the version's requests on every replica fill the queue. */
  enqueue(invocation: Invocation) {
    const { versionId } = invocation;
    if (this.depth(versionId) >= this.#options.maxDepth) {
      throw new Problem('too-many-requests', `The queue of function version '${versionId}' is full (${this.#options.maxDepth} waiting)`, {
        headers: { 'retry-after': '1' },
      });
    }
    this.#versionQueue(versionId).push(invocation);
  }

  requeue(invocation: Invocation) {
    this.#versionQueue(invocation.versionId).unshift(invocation);
  }

  remove(invocation: Invocation): boolean {
    return this.#waiting.get(invocation.versionId)?.remove(invocation.id) ?? false;
  }

  /** The request's place among the version's requests waiting on this replica. */
  position(invocation: Invocation): number | undefined {
    return this.#waiting.get(invocation.versionId)?.position(invocation.id);
  }

  /** Requests waiting for the version here, and on the other replicas as their records last said. */
  depth(versionId: string): number {
    return (this.#waiting.get(versionId)?.size ?? 0) + this.#leases.waitingElsewhere(versionId);
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
   * other version's keys are deleted; the first time, those left on the server are found.
   */
  retain(versionIds: ReadonlySet<string>): Promise<void> {
    this.#retaining = this.#retaining.then(async () => {
      this.#known ??= await keysOf([this.#kvs.ready, this.#kvs.slots]);
      for (const versionId of versionIds) this.#known.add(versionId);
      for (const versionId of [...this.#known].filter((known) => !versionIds.has(known))) {
        this.#known.delete(versionId);
        await this.#deleteVersion(versionId);
      }
    }).catch((error) => this.#options.log.warn({ err: error }, 'could not delete the keys of versions no longer deployed'));
    return this.#retaining;
  }

  /** The ready entry first (every replica lets the version go when it sees it deleted), then its slots. */
  async #deleteVersion(versionId: string) {
    this.#options.log.info({ versionId }, 'version no longer deployed: its keys are deleted');
    await this.#readySet.delete(versionId);
    await this.#kvs.slots.delete(versionId);
  }

  /**
   * Whether a replica may still answer (a killed one's stored running requests are ended by the others):
   * only no responder on its subjects says it is gone, not a slow answer or this replica cut off.
   */
  async alive(replica: string): Promise<boolean> {
    return !await this.#isGone(replica);
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
    for (const queue of this.#waiting.values()) queue.close();
    this.#leases.close();
    for (const subscription of this.#subscriptions) subscription.unsubscribe();
    for (const watch of this.#watches) watch.stop();
    await this.#nc.drain().catch(() => {});
  }

  async #start() {
    this.#subscriptions.push(this.#nc.subscribe(this.#names.replica(this.replicaId, 'ping'), { callback: (_error, msg) => void msg.respond('ok') }));
    await this.#follow('ready', () => this.#kvs.ready.watch(), (entry) => {
      if (entry.operation !== 'PUT') return this.#retired(entry.key);
      const instances = this.#readySet.opened(entry.key, entry.string());
      if (instances) this.#announce(entry.key, instances);
    });
    // Opened again, it shows the entries as they are: changes made while it was closed were not seen.
    await this.#follow('slots', (again) => this.#kvs.slots.watch({ include: again ? KvWatchInclude.LastValue : KvWatchInclude.UpdatesOnly }), (entry) => {
      this.#leases.changed(entry.key, entry);
    });
    void (async () => {
      for await (const status of this.#nc.status()) if (status.type === 'reconnect') this.#resync();
    })();
  }

  /**
   * The connection came back, maybe to another server of a cluster: the watches' consumers may be gone,
   * and nats.js would find out only after seconds of missed heartbeats. They are opened afresh at once.
   */
  #resync() {
    for (const watch of this.#watches) watch.stop();
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
   * The version's ready entry was deleted: placement deletes it with the version (its slots go too). Its
   * instances are forgotten and nothing more is written for it here; its waiting requests move on
   * (service.ts). A deletion by anyone else only empties the set until placement's next round.
   */
  #retired(versionId: string) {
    this.#announce(versionId, []);
    this.#readySet.forget(versionId);
    this.#leases.retire(versionId);
  }

  /** Whether a replica is gone: its subjects have no responder (a slow answer is not a verdict). */
  async #isGone(replica: string): Promise<boolean> {
    try {
      await this.#nc.request(this.#names.replica(replica, 'ping'), '', { timeout: PING_TIMEOUT_MS });
      return false;
    } catch (error) {
      const gone = (error as RequestError).isNoResponders?.() === true;
      if (gone) this.#leases.gone(replica);
      return gone;
    }
  }

  /** A version's ready set from the watch: its slots follow it, and those waiting for it look again. */
  #announce(versionId: string, instances: ReadyInstance[]) {
    if (instances.length) this.#leases.revive(versionId);
    this.#readySet.set(versionId, instances);
    this.#seen(versionId, instances);
    this.#leases.changed(versionId);
    if (!instances.length && !this.#waiting.get(versionId)?.size) this.#waiting.delete(versionId);
  }

  #versionQueue(versionId: string): VersionQueue {
    let queue = this.#waiting.get(versionId);
    if (!queue) this.#waiting.set(versionId, queue = new VersionQueue(versionId, this.#versionContext));
    return queue;
  }
}

/** The versions with an entry in `buckets` (the listing may still name one just deleted: deleting it again is harmless). */
async function keysOf(buckets: KV[]): Promise<Set<string>> {
  const versions = new Set<string>();
  for (const kv of buckets) for await (const key of await kv.keys()) versions.add(key);
  return versions;
}

/**
 * The release before queued waiting requests as tickets in a stream per version, with a bucket naming each
 * version's head: nothing uses them now, so they go (once: a replica that finds none deletes nothing).
 */
async function deleteTicketQueues(jsm: JetStreamManager, names: NatsNames) {
  const former = names.formerTicketQueues;
  for await (const name of jsm.streams.names()) {
    if (name === former.headsBucketStream || former.ticketStream.test(name)) await jsm.streams.delete(name).catch(() => false);
  }
}
