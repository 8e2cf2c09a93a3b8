// When video goes out with FEC (flexfec.ts), and how much of it. A clean link carries none (no FEC
// packet, nothing added to a media packet); once the link loses packets persistently, each frame's
// packets are protected by FEC packets in proportion to the loss, and the encoder is given that much
// less of the estimate. Pure arithmetic on the loss counts it is given, about once a second (rtp.ts
// feeds it the transport-wide feedback's last second).

/** A second with this loss or more counts as lossy; two in a row switch FEC on (one can be chance)... */
const LOSSY = 0.03;
const LOSSY_SECONDS = 2;
/** ...and it goes off after this many seconds in a row below CLEAN (hysteresis: the switch costs nothing, but flapping would). */
const CLEAN = 0.01;
const CLEAN_SECONDS = 10;
/** Fewer packets than this in a second say too little about the loss (3 % of 50 is one or two packets). */
const MIN_PACKETS = 50;
/**
 * FEC packets per media packet: three times the loss, between 10 % and 50 %. One FEC packet repairs one
 * loss among the media packets it covers: at 5 % loss and 15 %, one FEC packet for about 7 media packets,
 * a frame of 15 packets still needs a retransmission about one time in seven instead of one in two.
 */
const RATIO_PER_LOSS = 3;
const MIN_RATIO = 0.1;
const MAX_RATIO = 0.5;
/** The ratio follows the worst second of the last this many (loss comes and goes in spells). */
const PEAK_SECONDS = 5;
/**
 * A keyframe is the costliest frame to lose: the picture waits for it, and the frames after it need it.
 * While the link loses packets it gets this many times the other frames' ratio (at most MAX_RATIO), and
 * FEC already in the first seconds of loss, before it is switched on for the others (a repair keyframe
 * sent unprotected at 10 % loss lost packets of its own, which cost another keyframe 500 ms later).
 */
const KEYFRAME_FACTOR = 2;
/** Fewer packets than this in the last second say nothing of the loss to a keyframe. */
const KEYFRAME_MIN_PACKETS = 20;

export class FecPolicy {
  #on = false;
  #lossySeconds = 0;
  #cleanSeconds = 0;
  #recentLoss: number[] = [];

  get on(): boolean {
    return this.#on;
  }

  /**
   * One second's counts from the transport-wide feedback; returns the protection ratio (0: no FEC). A
   * second in which the bottleneck's queue built (`congested`) says nothing of random loss: its losses
   * are the queue overflowing, which FEC would only add to, and the rate controller answers them.
   */
  update(lost: number, packets: number, congested = false): number {
    if (packets < MIN_PACKETS || congested) return this.ratio;
    const loss = lost / packets;
    this.#recentLoss.push(loss);
    if (this.#recentLoss.length > PEAK_SECONDS) this.#recentLoss.shift();
    this.#lossySeconds = loss >= LOSSY ? this.#lossySeconds + 1 : 0;
    this.#cleanSeconds = loss < CLEAN ? this.#cleanSeconds + 1 : 0;
    if (!this.#on && this.#lossySeconds >= LOSSY_SECONDS) this.#on = true;
    else if (this.#on && this.#cleanSeconds >= CLEAN_SECONDS) this.#on = false;
    return this.ratio;
  }

  get ratio(): number {
    return this.#on ? ratioFor(Math.max(...this.#recentLoss)) : 0;
  }

  /**
   * The ratio for a keyframe, given the last second's counts (0 on a clean link): KEYFRAME_FACTOR times
   * the ratio, or times what the loss would call for while FEC is not on yet. Unless the bottleneck's
   * queue built in that second (`congested`): more bytes would only add to its overflow.
   */
  keyframeRatio(lost: number, packets: number, congested = false): number {
    if (congested) return this.ratio;
    const loss = packets >= KEYFRAME_MIN_PACKETS ? lost / packets : 0;
    const ratio = this.#on ? this.ratio : loss >= CLEAN ? ratioFor(loss) : 0;
    return Math.min(MAX_RATIO, KEYFRAME_FACTOR * ratio);
  }
}

/** RATIO_PER_LOSS times the loss, between MIN_RATIO and MAX_RATIO, in steps of 5 % (the encoder's target follows the ratio, and need not move for every second's noise). */
function ratioFor(loss: number): number {
  return Math.round(Math.min(MAX_RATIO, Math.max(MIN_RATIO, RATIO_PER_LOSS * loss)) * 20) / 20;
}
