// What the userspace link emulator (link-emulator.ts) does to each packet of one direction: a fixed
// delay plus a uniform jitter, and random (Bernoulli) loss, drawn from a seeded generator so a run can be
// repeated draw for draw. Packets leave in the order they came, as from a real access link's FIFO: a
// packet whose jittered time falls before its predecessor's leaves right after it (netem reorders
// instead, which a real path seldom does and which would read as loss to a receiver's NACK logic).

export type Impairment = {
  /** One-way delay, ms (half of the round trip the profile names). */
  delayMs: number;
  /** Each packet's delay varies uniformly within ± this, ms. */
  jitterMs: number;
  /** Fraction of packets dropped, 0..1. */
  loss: number;
  /**
   * RTP packets of these payload types are all dropped (RTP's header is in the clear under SRTP): one
   * stream's retransmissions, say, to see what repairs a loss without them.
   */
  dropPayloadTypes?: number[];
};

export const NO_IMPAIRMENT: Impairment = { delayMs: 0, jitterMs: 0, loss: 0 };

/** mulberry32: a small, fast 32-bit generator; good enough for loss and jitter draws, and seedable. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

export class ImpairedDirection {
  #impairment: Impairment;
  #random: () => number;
  #lastDepartureMs = -Infinity;
  passed = 0;
  dropped = 0;

  constructor(impairment: Impairment, seed: number) {
    this.#impairment = impairment;
    this.#random = seededRandom(seed);
  }

  get impairment(): Impairment {
    return this.#impairment;
  }

  set impairment(impairment: Impairment) {
    this.#impairment = impairment;
  }

  /** Starts the draws over from `seed`: two runs of one profile lose the same packets by number. */
  reseed(seed: number): void {
    this.#random = seededRandom(seed);
  }

  /** When a packet that arrives at `nowMs` leaves, or undefined when it is lost. */
  schedule(nowMs: number): number | undefined {
    const { delayMs, jitterMs, loss } = this.#impairment;
    // Both draws happen for every packet, so one profile's loss pattern does not depend on its jitter.
    const lost = this.#random() < loss;
    const jitter = (this.#random() * 2 - 1) * jitterMs;
    if (lost) {
      this.dropped++;
      return undefined;
    }
    this.passed++;
    this.#lastDepartureMs = Math.max(this.#lastDepartureMs, nowMs + Math.max(0, delayMs + jitter));
    return this.#lastDepartureMs;
  }
}
