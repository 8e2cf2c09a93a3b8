// The NATS objects of the shared queue: a work-queue stream per version (its tickets, FIFO; max_msgs is the
// queue limit, so a full queue is refused by the broker for every replica at once) with one durable head
// consumer, and the KV buckets. Made by whichever replica needs them first; deleted with their version.
import { nanos, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import type { NatsNames } from './nats.ts';

export const ACK_WAIT_MS = 10_000;
/** Tickets the head holder takes ahead: granted in order, as slots allow. */
export const HEAD_WINDOW = 256;
/** Function version ids (control/functions: random UUIDs). */
const VERSION_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** How the head consumer of every version's stream is made. */
const HEAD_CONSUMER = { durable_name: 'head', ack_policy: AckPolicy.Explicit, max_ack_pending: HEAD_WINDOW, ack_wait: nanos(ACK_WAIT_MS), max_deliver: -1 };

export class QueueStreams {
  readonly #jsm: JetStreamManager;
  readonly #names: NatsNames;
  readonly #maxDepth: number;
  /** Copies of each queue stream: natsReplicas, or what the server keeps. */
  readonly #copies: number;
  readonly #made = new Map<string, Promise<void>>();

  constructor(jsm: JetStreamManager, names: NatsNames, options: { maxDepth: number; copies: number }) {
    this.#jsm = jsm;
    this.#names = names;
    this.#maxDepth = options.maxDepth;
    this.#copies = options.copies;
  }

  /** The version's stream and head consumer, created once by whichever replica needs them first. */
  ensure(versionId: string): Promise<void> {
    let made = this.#made.get(versionId);
    if (!made) {
      made = this.#make(versionId);
      made.catch(() => this.#made.delete(versionId));
      this.#made.set(versionId, made);
    }
    return made;
  }

  /** The version's stream was deleted (perhaps by another replica): made again when next needed. */
  forget(versionId: string) {
    this.#made.delete(versionId);
  }

  /**
   * The head's previous holder is gone with tickets it had taken (unacked until their ack wait): the
   * consumer is made anew, so they come again at once, in order.
   */
  async resetHead(versionId: string) {
    const name = this.#names.queueStream(versionId);
    await this.#jsm.consumers.delete(name, 'head').catch(() => false);
    await this.#jsm.consumers.add(name, HEAD_CONSUMER);
  }

  /** A ticket whose request left; a failed delete leaves a ticket the head drops (its request is not waiting). */
  deleteTicket(versionId: string, seq: number) {
    void this.#jsm.streams.deleteMessage(this.#names.queueStream(versionId), seq, false).catch(() => {});
  }

  /** The sequence of the oldest ticket still in the version's stream. */
  async firstSeq(versionId: string): Promise<number> {
    return (await this.#jsm.streams.info(this.#names.queueStream(versionId))).state.first_seq;
  }

  /** Tickets waiting in the version's stream; undefined when it has none. */
  async depth(versionId: string): Promise<number | undefined> {
    const info = await this.#jsm.streams.info(this.#names.queueStream(versionId)).catch(() => undefined);
    return info?.state.messages;
  }

  /** Versions with a queue stream or an entry in `buckets`. */
  async onServer(buckets: KV[]): Promise<Set<string>> {
    const versions = new Set<string>();
    const streamPrefix = this.#names.queueStream('');
    for await (const name of this.#jsm.streams.names()) {
      // Only a version id after the prefix: another installation's prefix may start like ours.
      const versionId = name.slice(streamPrefix.length);
      if (name.startsWith(streamPrefix) && VERSION_ID.test(versionId)) versions.add(versionId);
    }
    for (const kv of buckets) for await (const key of await kv.keys()) versions.add(key);
    return versions;
  }

  /** Deletes the version's stream (its head loops stop when they see the version's ready entry deleted: forget). */
  async delete(versionId: string) {
    await this.#jsm.streams.delete(this.#names.queueStream(versionId)).catch((error: Error) => {
      if (error.name !== 'StreamNotFoundError' && !/stream not found/i.test(error.message)) throw error;
    });
  }

  async #make(versionId: string) {
    const name = this.#names.queueStream(versionId);
    const stream = {
      name, subjects: [this.#names.queueSubject(versionId)], retention: RetentionPolicy.Workqueue, storage: StorageType.File,
      max_msgs: this.#maxDepth, discard: DiscardPolicy.New,
    };
    // Every replica that sees the version ready gets here; one that made it between our look and our add
    // (perhaps with its own maxDepth during a rolling change) made the stream the version keeps.
    const replicas = this.#copies;
    const info = await this.#jsm.streams.info(name).catch(() => undefined);
    if (!info) await this.#jsm.streams.add({ ...stream, num_replicas: replicas }).catch((error) => this.#jsm.streams.info(name).catch(() => { throw error; }));
    else if (info.config.num_replicas !== replicas) await this.#jsm.streams.update(name, { ...info.config, num_replicas: replicas });
    await this.#headConsumer(name);
  }

  /** The stream's head consumer, made by whichever replica gets here first. */
  async #headConsumer(stream: string) {
    for (let tries = 1; ; tries++) {
      try {
        await this.#jsm.consumers.add(stream, HEAD_CONSUMER);
        return;
      } catch (error) {
        if (tries === 3) throw error;
      }
      // It is there (a stream made before the head lock has it at max_ack_pending 1: raised in place), or a
      // head's reset deleted it between the two calls (resetHead): then it is made again.
      try {
        await this.#jsm.consumers.update(stream, 'head', { max_ack_pending: HEAD_WINDOW });
        return;
      } catch (error) {
        if (!/consumer not found/i.test((error as Error).message)) throw error;
      }
    }
  }

}

/**
 * A KV bucket of the platform, made with `replicas` copies or bound as it is; one made by an older release
 * (the heads bucket's entries expired then) or with another count of copies is brought in line. With the
 * count of copies the server keeps (a single server keeps one, whatever is asked).
 */
export async function openBucket(nc: NatsConnection, jsm: JetStreamManager, name: string, replicas: number): Promise<{ kv: KV; kept: number }> {
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
