// Which replica serves a version's queue head: one NATS KV entry per version (bucket svc_heads, whose
// entries expire after HEAD_TTL_MS), taken by create and kept by compare-and-set renewals. One holder at a
// time lets it take many tickets in order and grant them in a batch; a killed holder's entry expires and
// another replica takes over.
import type { KV } from '@nats-io/kv';

export const HEAD_TTL_MS = 10_000;
const RENEW_MS = HEAD_TTL_MS / 4;

export class HeadLock {
  readonly #kv: KV;
  readonly #key: string;
  readonly #replica: string;
  readonly #renewer: NodeJS.Timeout;
  #revision: number;
  #lost = false;
  #onLost: () => void = () => {};

  private constructor(kv: KV, key: string, replica: string, revision: number) {
    this.#kv = kv;
    this.#key = key;
    this.#replica = replica;
    this.#revision = revision;
    this.#renewer = setInterval(() => void this.#renew(), RENEW_MS);
  }

  /** The head of `versionId` for this replica, or undefined while another replica holds it. */
  static async take(kv: KV, versionId: string, replica: string): Promise<HeadLock | undefined> {
    try {
      return new HeadLock(kv, versionId, replica, await kv.create(versionId, replica));
    } catch (error) {
      if (!/wrong last sequence|key exists/i.test((error as Error).message)) throw error;
    }
    // Still ours after a renewal that failed on the way (a timeout): kept rather than waited out.
    const entry = await kv.get(versionId);
    if (entry?.operation !== 'PUT' || entry.string() !== replica) return undefined;
    const revision = await kv.update(versionId, replica, entry.revision).catch(() => undefined);
    return revision === undefined ? undefined : new HeadLock(kv, versionId, replica, revision);
  }

  get lost(): boolean {
    return this.#lost;
  }

  /** Called once when a renewal fails: another replica may hold the head now. */
  onLost(lost: () => void) {
    this.#onLost = lost;
  }

  async release() {
    clearInterval(this.#renewer);
    if (this.#lost) return;
    this.#lost = true;
    await this.#kv.delete(this.#key, { previousSeq: this.#revision }).catch(() => {});
  }

  async #renew() {
    try {
      this.#revision = await this.#kv.update(this.#key, this.#replica, this.#revision);
    } catch {
      if (this.#lost) return;
      this.#lost = true;
      clearInterval(this.#renewer);
      this.#onLost();
    }
  }
}
