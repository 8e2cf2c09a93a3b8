// What to give up when the link carries too little for the full picture: resolution (a game keeps its
// frame rate), frame rate (a desktop keeps its sharpness), or some of both. The app chooses with
// STREAMING_DEGRADATION (or `disabled`: the full picture at any rate). Pure arithmetic on the rate and times it is given; the encoder applies the
// operating point it returns (a frame rate by skipping frames, a size by scaling before a fresh encoder
// context, which costs one keyframe).

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

/** Steps as (scale of width and height, divisor of the frame rate), best first. */
const LADDERS: Record<DegradationPreference, [scale: number, fpsDivisor: number][]> = {
  'maintain-framerate': [[1, 1], [3 / 4, 1], [1 / 2, 1], [1 / 4, 1]],
  'maintain-resolution': [[1, 1], [1, 2], [1, 3], [1, 6]],
  balanced: [[1, 1], [3 / 4, 1], [3 / 4, 2], [1 / 2, 2], [1 / 4, 2]],
  disabled: [[1, 1]],
};

/** The rate at which a point still looks right, kbit/s. */
export function kbpsNeeded(point: OperatingPoint): number {
  return (point.width * point.height * point.fps * BITS_PER_PIXEL) / 1000;
}

export class DegradationPolicy {
  readonly points: OperatingPoint[];
  #index = 0;
  /** Since when the rate has asked for a step down (+) or allowed a step up (-). */
  #pressure: { direction: 1 | -1; sinceMs: number } | undefined;

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

  /** The rate the link carries now; returns the point to encode at (a new object only when it changed). */
  update(kbps: number, nowMs: number): OperatingPoint {
    const direction = this.#direction(kbps);
    if (direction === 0) {
      this.#pressure = undefined;
      return this.point;
    }
    if (this.#pressure?.direction !== direction) this.#pressure = { direction, sinceMs: nowMs };
    if (nowMs - this.#pressure.sinceMs >= (direction === 1 ? DOWN_HOLD_MS : UP_HOLD_MS)) {
      this.#index += direction;
      this.#pressure = undefined;
    }
    return this.point;
  }

  #direction(kbps: number): 1 | -1 | 0 {
    if (this.#index < this.points.length - 1 && kbps < kbpsNeeded(this.point)) return 1;
    if (this.#index > 0 && kbps >= UP_MARGIN * kbpsNeeded(this.points[this.#index - 1])) return -1;
    return 0;
  }
}
