// Which replica serves a version's queue head: one NATS KV entry per version (bucket <prefix>_heads) naming
// its holder, taken by create. Nothing renews it: a holder keeps the head while its NATS connection lives.
// Another replica takes it over only when it finds the holder gone (its subjects have no responder: its
// connection closed, as a kill -9 closes it at once), by a compare-and-set delete of the holder's entry,
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
    let tookOver = false;
    // An entry of this replica's own that it no longer holds (its release failed) is taken over too.
    if (entry && (entry.holder === replica || await gone(entry.holder))) {
      // Only the entry seen gone is deleted: a replica that took it meanwhile keeps it.
      if (!await kv.delete(versionId, { previousSeq: entry.revision }).then(() => true, () => false)) return undefined;
      tookOver = true;
    } else if (entry) return undefined;
    try {
      return new HeadLock(kv, versionId, await kv.create(versionId, replica), tookOver);
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
