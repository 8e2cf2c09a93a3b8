// What to give up when the link carries too little for the full picture: resolution (a game keeps its
// frame rate), frame rate (a desktop keeps its sharpness), or some of both. The app chooses with
// STREAMING_DEGRADATION (or `disabled`: the full picture at any rate). When to give it up is decided by
// what the encoder reports, as libwebrtc's quality scaler does: the quantiser (QP) of its recent frames.
// A simple picture stays sharp at a low rate and keeps its size; a noisy one turns to mush and steps
// down. Without QP reports (libvpx gives none we read) a fixed bits-per-pixel rule stands in. Pure
// arithmetic on the rate, QPs and times it is given; the encoder applies the operating point it returns
// (a frame rate by skipping frames, a size by scaling before a fresh encoder context, which costs one
// keyframe).

export type DegradationPreference = 'maintain-framerate' | 'maintain-resolution' | 'balanced' | 'disabled';

export type OperatingPoint = { width: number; height: number; fps: number };

/**
 * Bits per pixel per frame below which the picture turns to mush at the size it has: about what libwebrtc
 * wants before it starts a stream at a resolution (500 kbit/s at 640x360@30, 1.7 Mbit/s at 1280x720@30).
 */
const BITS_PER_PIXEL = 0.07;
/** A step back up needs this much more than the higher point needs, so the two do not alternate. */
const UP_MARGIN = 1.3;
/** The estimate must stay low this long before a step down (one bad report is not a trend)... */
const DOWN_HOLD_MS = 1000;
/** ...and high this long before a step up (each size change costs a keyframe). */
const UP_HOLD_MS = 2000;

/**
 * The mean H.264 QP past which the picture is poor (libwebrtc's quality scaler steps down above 37 for
 * H.264), over the frames of the last QP_WINDOW_MS (keyframes left out: their QP is another matter); it
 * takes QP_MIN_FRAMES of them at the point the encoder is at. On the bench's noisy 640x360@30 picture
 * libx264 reports QP 41 at 300 kbit/s, 37 at 500, 33 at 1,000 and 29 at 6,000; a still or flat picture
 * stays far below at any of these rates.
 */
const QP_HIGH = 37;
const QP_WINDOW_MS = 1000;
const QP_MIN_FRAMES = 10;
/**
 * A point left because it was poor is tried again only at this many times the rate it was poor at (about
 * 6 QP lower). libwebrtc steps up on a low QP (below 24), which a noisy picture does not reach even at
 * the full rate (29 at 6 Mbit/s above): it would stay small after the link came back.
 */
const RETRY_FACTOR = 2;

/**
 * Steps as (scale of width and height, divisor of the frame rate), best first. `balanced` gives up size
 * down to half before any frames, as libwebrtc's balanced mode takes resolution first while the picture is
 * larger than VGA: at 1280x720@60 and about 1 Mbit/s that is 640x360@60 rather than 960x540@30.
 */
const LADDERS: Record<DegradationPreference, [scale: number, fpsDivisor: number][]> = {
  'maintain-framerate': [[1, 1], [3 / 4, 1], [1 / 2, 1], [1 / 4, 1]],
  'maintain-resolution': [[1, 1], [1, 2], [1, 3], [1, 6]],
  balanced: [[1, 1], [3 / 4, 1], [1 / 2, 1], [1 / 2, 2], [1 / 4, 2]],
  disabled: [[1, 1]],
};

/** The rate at which a point still looks right, kbit/s. */
export function kbpsNeeded(point: OperatingPoint): number {
  return (point.width * point.height * point.fps * BITS_PER_PIXEL) / 1000;
}

export class DegradationPolicy {
  readonly points: OperatingPoint[];
  #index = 0;
  /** Since when a step down (+) or up (-) has been called for. */
  #pressure: { direction: 1 | -1; sinceMs: number } | undefined;
  /** QPs of the encoder's recent frames at the current point. */
  #qps: { atMs: number; qp: number }[] = [];
  /** The estimate when each point was last stepped down from: it was poor at that rate. */
  readonly #leftAtKbps: number[] = [];
  /** Whether the encoder reports QPs: then a point just taken waits for its own before any step down. */
  #reportsQp = false;

  constructor(preference: DegradationPreference, full: OperatingPoint) {
    this.points = LADDERS[preference].map(([scale, divisor]) => ({
      // Even sizes for 4:2:0; at least 64 pixels, as the configuration allows.
      width: Math.max(64, 2 * Math.round((full.width * scale) / 2)),
      height: Math.max(64, 2 * Math.round((full.height * scale) / 2)),
      fps: Math.max(1, Math.round(full.fps / divisor)),
    }));
  }

  get point(): OperatingPoint {
    return this.points[this.#index];
  }

  /** The QP the encoder gave a frame (not a keyframe) encoded at the current point. */
  noteQp(qp: number, nowMs: number): void {
    this.#reportsQp = true;
    this.#qps.push({ atMs: nowMs, qp });
    while (this.#qps[0].atMs < nowMs - QP_WINDOW_MS) this.#qps.shift();
  }

  /** The mean QP of the last QP_WINDOW_MS, when the encoder reported enough frames. */
  #recentQp(nowMs: number): number | undefined {
    const recent = this.#qps.filter((sample) => sample.atMs >= nowMs - QP_WINDOW_MS);
    return recent.length >= QP_MIN_FRAMES ? recent.reduce((sum, sample) => sum + sample.qp, 0) / recent.length : undefined;
  }

  /** The rate the link carries now; returns the point to encode at (a new object only when it changed). */
  update(kbps: number, nowMs: number): OperatingPoint {
    const direction = this.#direction(kbps, this.#recentQp(nowMs));
    if (direction === 0) {
      this.#pressure = undefined;
      return this.point;
    }
    if (this.#pressure?.direction !== direction) this.#pressure = { direction, sinceMs: nowMs };
    if (nowMs - this.#pressure.sinceMs >= (direction === 1 ? DOWN_HOLD_MS : UP_HOLD_MS)) {
      if (direction === 1) this.#leftAtKbps[this.#index] = kbps;
      this.#index += direction;
      this.#pressure = undefined;
      this.#qps = []; // the QPs of another size or frame rate say nothing of this one
    }
    return this.point;
  }

  /**
   * Down when the picture is poor: QP high, or without QPs fewer bits per pixel than it needs. Up when the
   * rate affords the higher point: with the margin over what it needs, and twice the rate at which it was
   * poor last (else a picture poor there at this rate would go up and come back down, a keyframe each way).
   */
  #direction(kbps: number, qp: number | undefined): 1 | -1 | 0 {
    const poor = qp !== undefined ? qp > QP_HIGH : !this.#reportsQp && kbps < kbpsNeeded(this.point);
    if (this.#index < this.points.length - 1 && poor) return 1;
    if (this.#index === 0) return 0;
    const higher = this.#index - 1;
    const affords = kbps >= UP_MARGIN * kbpsNeeded(this.points[higher]) && kbps >= RETRY_FACTOR * (this.#leftAtKbps[higher] ?? 0);
    return affords ? -1 : 0;
  }
}
