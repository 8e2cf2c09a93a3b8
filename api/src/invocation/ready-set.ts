// The ready instances of each version, as every API replica sees them: the placement replica publishes a
// version's set in the KV bucket <prefix>_ready (signed, replica-signing.ts) and every replica watches it;
// an entry whose signature does not verify is dropped. An instance that failed a connection here is left
// out until placement announces a new set.
import type { KV } from '@nats-io/kv';
import { z } from 'zod';
import { endpointSchema } from '../compute/protocol.ts';
import type { ReadyInstance } from '../control/instances/service.ts';
import type { Logger } from '../logger.ts';
import type { NatsNames } from './nats.ts';
import type { ReplicaSigner } from './replica-signing.ts';

export const readyInstanceSchema = z.object({
  instanceId: z.string(), versionId: z.string(), clusterId: z.string(), nodeId: z.string().optional(), maxRequestConcurrency: z.number().int(), gpu: z.string(), instanceType: z.string(),
  backend: z.string(), region: z.string(),
  endpoint: endpointSchema,
});
const readySchema = z.array(readyInstanceSchema);

/** What a signature is about: a version's ready instances. */
const readyContext = (versionId: string) => `ready ${versionId}`;

export class ReadySet {
  readonly #kv: KV;
  readonly #signer: ReplicaSigner;
  readonly #log: Logger;
  readonly #names: NatsNames;
  readonly #instances = new Map<string, ReadyInstance[]>();
  /** Instances that failed a connection here, left out until placement announces a new set. */
  readonly #benched = new Set<string>();
  /** What placement (on this replica) last published per version, as the watch decodes it. */
  readonly #published = new Map<string, string>();
  /** Placement's sets (on this replica), to put back over an entry it did not sign. */
  readonly #mine = new Map<string, ReadyInstance[]>();
  /** Each version's writes, one after the other: a put slowed by a failover never lands after a later write. */
  readonly #writes = new Map<string, Promise<void>>();

  constructor(kv: KV, signer: ReplicaSigner, log: Logger, names: NatsNames) {
    this.#kv = kv;
    this.#signer = signer;
    this.#log = log;
    this.#names = names;
  }

  /**
   * From placement (on the replica that runs it): published for every replica when it differs from what
   * was published last (compared as the watch decodes it, so an unchanged set is never written again).
   */
  publish(versionId: string, instances: ReadyInstance[]) {
    this.#mine.set(versionId, instances);
    const parsed = readySchema.safeParse(instances);
    const decoded = JSON.stringify(parsed.success ? parsed.data : instances);
    if ((this.#published.get(versionId) ?? JSON.stringify(this.#instances.get(versionId) ?? [])) === decoded) return;
    this.#published.set(versionId, decoded);
    this.#put(versionId, instances);
  }

  #put(versionId: string, instances: ReadyInstance[]) {
    void this.#write(versionId, async () => {
      await this.#kv.put(versionId, this.#signer.sign(readyContext(versionId), instances));
    }).catch((error) => {
      this.#published.delete(versionId);
      this.#log.warn({ err: error, versionId }, 'could not publish ready instances');
    });
  }

  /** From placement (on the replica that runs it), with the version: after any put still in flight. */
  delete(versionId: string): Promise<void> {
    return this.#write(versionId, () => this.#kv.delete(versionId));
  }

  #write(versionId: string, write: () => Promise<void>): Promise<void> {
    const written = (this.#writes.get(versionId) ?? Promise.resolve()).catch(() => {}).then(write);
    this.#writes.set(versionId, written);
    void written.finally(() => this.#writes.get(versionId) === written && this.#writes.delete(versionId)).catch(() => {});
    return written;
  }

  /**
   * The instances placement announced for a version (an entry of the watch); undefined (logged) for an
   * entry placement did not sign: the last good one stays here, and placement (on this replica) puts its
   * own back at once, for the replicas that start after it.
   */
  opened(versionId: string, signed: string): ReadyInstance[] | undefined {
    const opened = this.#signer.open(readyContext(versionId), signed);
    const parsed = opened && readySchema.safeParse(opened.value);
    if (parsed?.success) return parsed.data;
    this.#published.delete(versionId);
    const mine = this.#mine.get(versionId);
    if (mine) this.#put(versionId, mine);
    this.#log.warn({ versionId, bucket: this.#names.bucket('ready') }, `ready instances ${opened ? 'signed but do not decode' : 'not signed by placement'}; ignored`);
    return undefined;
  }

  /** The version's set as announced: the instances benched here take requests again. */
  set(versionId: string, instances: ReadyInstance[]) {
    this.#instances.set(versionId, instances);
    for (const instance of instances) this.#benched.delete(instance.instanceId);
  }

  /** Every version's set as announced. */
  announced(): IterableIterator<[string, ReadyInstance[]]> {
    return this.#instances.entries();
  }

  /** The instances of the version that take requests from this replica. */
  usable(versionId: string): ReadyInstance[] {
    return (this.#instances.get(versionId) ?? []).filter((instance) => !this.#benched.has(instance.instanceId));
  }

  /** The instance failed a connection here: it gets nothing more until placement announces a new set. */
  bench(instanceId: string) {
    this.#benched.add(instanceId);
  }

  /** The version was deleted: nothing of it is kept. */
  forget(versionId: string) {
    this.#published.delete(versionId);
    this.#mine.delete(versionId);
    this.#instances.delete(versionId);
  }
}
