// The in-process frame source: a frame clock at the configured rate that renders the scene into one of a
// few preallocated I420 buffers and hands it to the encoder. A buffer is reused only once ffmpeg has
// taken all of its bytes; if none is free, or the encoder is behind, the tick is skipped rather than
// queued, so a slow encoder costs frame rate, never latency.
import type { VideoEncoder } from './encoder.ts';
import type { Scene } from './scene.ts';

const POOL_SIZE = 3;

export class FrameSource {
  readonly #scene: Scene;
  readonly #encoder: VideoEncoder;
  readonly #intervalMs: number;
  readonly #free: Buffer[] = [];
  #timer: NodeJS.Timeout | undefined;
  #startMs = 0;
  #ticks = 0;
  #lastTickMs = -Infinity;
  #frameNumber = 0;
  framesRendered = 0;
  framesSkipped = 0;

  constructor(scene: Scene, encoder: VideoEncoder, fps: number) {
    this.#scene = scene;
    this.#encoder = encoder;
    this.#intervalMs = 1000 / fps;
    for (let i = 0; i < POOL_SIZE; i++) this.#free.push(Buffer.allocUnsafeSlow(scene.frameBytes));
  }

  get frameNumber(): number {
    return this.#frameNumber;
  }

  get running(): boolean {
    return this.#timer !== undefined;
  }

  /** Renders one frame for the encoder to turn into the session's first keyframe ahead of time. */
  prime(): void {
    const buffer = this.#free.pop();
    if (!buffer) return;
    const now = performance.now();
    const frameNumber = ++this.#frameNumber;
    this.#scene.render(buffer, frameNumber, now);
    if (!this.#encoder.prime(buffer, frameNumber, now, () => this.#free.push(buffer))) this.#free.push(buffer);
  }

  start(): void {
    if (this.#timer) return;
    this.#startMs = performance.now();
    this.#ticks = 0;
    this.#tick();
  }

  stop(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /**
   * New input arrived. If the next frame is more than half an interval away, render it now and restart
   * the clock from here: the frame rate never exceeds the configured one by more than a single early
   * frame, and the clock falls into step with the client's input rhythm instead of adding up to a whole
   * frame interval of waiting to every input event.
   */
  kick(): void {
    if (!this.#timer) return;
    if (performance.now() - this.#lastTickMs < this.#intervalMs / 2) return;
    clearTimeout(this.#timer);
    this.#startMs = performance.now();
    this.#ticks = 0;
    this.#tick();
  }

  #tick = (): void => {
    const now = performance.now();
    this.#lastTickMs = now;
    const buffer = this.#free.pop();
    if (buffer) {
      const frameNumber = ++this.#frameNumber;
      this.#scene.render(buffer, frameNumber, now);
      const accepted = this.#encoder.submit(buffer, frameNumber, now, () => this.#free.push(buffer));
      if (accepted) this.framesRendered++;
      else {
        this.#free.push(buffer);
        this.framesSkipped++;
      }
    } else {
      this.framesSkipped++;
    }
    // Schedule against the start time, not the previous tick, so timer jitter does not accumulate;
    // after a stall, skip the missed ticks instead of bursting to catch up.
    this.#ticks = Math.max(this.#ticks + 1, Math.floor((now - this.#startMs) / this.#intervalMs) + 1);
    const delay = this.#startMs + this.#ticks * this.#intervalMs - performance.now();
    this.#timer = setTimeout(this.#tick, Math.max(0, delay));
  };
}
