// Which replica serves a version's queue head: one NATS KV entry per version (bucket <prefix>_heads) naming
// its holder, taken by create. Nothing renews it: a holder keeps the head while its NATS connection lives.
// Another replica takes it over only when it finds the holder gone (its subjects have no responder: its
// connection closed, as a kill -9 closes it at once), by a compare-and-set of the holder's entry to its own,
// so an idle version costs no message. A holder learns that it lost the head from the bucket's watch.
import type { KV } from '@nats-io/kv';

/** What the replica knows of a version's entry (from the watch): its holder and revision. */
export interface HeadEntry {
  holder: string;
  revision: number;
}

export class HeadLock {
  readonly #kv: KV;
  readonly #key: string;
  readonly #revision: number;
  /** The previous holder was gone: the tickets it had taken wait unacked and must be handed out again. */
  readonly tookOver: boolean;
  #lost = false;
  #onLost: () => void = () => {};

  private constructor(kv: KV, key: string, revision: number, tookOver: boolean) {
    this.#kv = kv;
    this.#key = key;
    this.#revision = revision;
    this.tookOver = tookOver;
  }

  /**
   * The head of `versionId` for this replica, or undefined while a live replica holds it. `entry` is the
   * holder known from the watch (undefined: none known); `gone` says whether a replica no longer answers.
   */
  static async take(kv: KV, versionId: string, replica: string, entry: HeadEntry | undefined, gone: (replica: string) => Promise<boolean>): Promise<HeadLock | undefined> {
    if (entry) {
      // An entry of this replica's own that it no longer holds (its release failed) is taken again too.
      if (entry.holder !== replica && !await gone(entry.holder)) return undefined;
      // One compare-and-set from the entry seen to this replica's: a replica that took it meanwhile keeps it,
      // and no other sees the head free in between.
      const revision = await kv.update(versionId, replica, entry.revision).catch(() => undefined);
      return revision === undefined ? undefined : new HeadLock(kv, versionId, revision, true);
    }
    try {
      return new HeadLock(kv, versionId, await kv.create(versionId, replica), false);
    } catch (error) {
      if (!/wrong last sequence|key exists/i.test((error as Error).message)) throw error;
      return undefined;
    }
  }

  get revision(): number {
    return this.#revision;
  }

  get lost(): boolean {
    return this.#lost;
  }

  /** Called once when the head is lost (the watch shows another entry, or none). */
  onLost(lost: () => void) {
    this.#onLost = lost;
  }

  /** The watch saw the entry change under this holder (it was taken over while this replica was cut off). */
  lose() {
    if (this.#lost) return;
    this.#lost = true;
    this.#onLost();
  }

  async release() {
    if (this.#lost) return;
    this.#lost = true;
    await this.#kv.delete(this.#key, { previousSeq: this.#revision }).catch(() => {});
  }
}
