// The test scene as a frame source: a frame clock at the configured rate renders the scene into a pooled
// I420 buffer each tick. Input renders a frame at once when the next tick is more than half an interval
// away, so the scene measures the pipeline, not the frame clock.
import type { InputMessage } from '../client/protocol.ts';
import type { FrameEncoder } from './encoder.ts';
import { FrameFeed, type FrameSource } from './frame-source.ts';
import { Scene, type SceneInput } from './scene.ts';

export class SceneSource implements FrameSource {
  readonly kind = 'scene';
  readonly feed: FrameFeed;
  readonly #scene: Scene;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | undefined;
  #startMs = 0;
  #ticks = 0;
  #lastTickMs = -Infinity;

  constructor(encoder: FrameEncoder, width: number, height: number, fps: number, barcode: boolean) {
    // The scene draws its own barcode (it knows the input it applied); the feed must not draw it again.
    this.#scene = new Scene(width, height, barcode);
    this.feed = new FrameFeed(encoder, width, height, false);
    this.#intervalMs = 1000 / fps;
  }

  prime(): void {
    this.feed.prime();
    this.#render();
  }

  start(): void {
    this.feed.start();
    if (this.#timer) return;
    this.#startMs = performance.now();
    this.#ticks = 0;
    this.#tick();
  }

  stop(): void {
    this.feed.stop();
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  async close(): Promise<void> {
    this.stop();
  }

  input(event: InputMessage): boolean {
    this.#scene.apply(toSceneInput(event));
    this.#kick();
    return true;
  }

  /**
   * New input arrived. If the next frame is more than half an interval away, render it now and restart
   * the clock from here: the frame rate never exceeds the configured one by more than a single early
   * frame, and the clock falls into step with the client's input rhythm instead of adding up to a whole
   * frame interval of waiting to every input event.
   */
  #kick(): void {
    if (!this.#timer) return;
    if (performance.now() - this.#lastTickMs < this.#intervalMs / 2) return;
    clearTimeout(this.#timer);
    this.#startMs = performance.now();
    this.#ticks = 0;
    this.#tick();
  }

  #render(): void {
    const buffer = this.feed.acquire();
    if (!buffer) return;
    const now = performance.now();
    this.#scene.render(buffer, this.feed.frameNumber + 1, now);
    this.feed.deliver(buffer, now);
  }

  #tick = (): void => {
    const now = performance.now();
    this.#lastTickMs = now;
    this.#render();
    // Schedule against the start time, not the previous tick, so timer jitter does not accumulate;
    // after a stall, skip the missed ticks instead of bursting to catch up.
    this.#ticks = Math.max(this.#ticks + 1, Math.floor((now - this.#startMs) / this.#intervalMs) + 1);
    const delay = this.#startMs + this.#ticks * this.#intervalMs - performance.now();
    this.#timer = setTimeout(this.#tick, Math.max(0, delay));
  };
}

function toSceneInput(event: InputMessage): SceneInput {
  switch (event.type) {
    case 'pointer': return { kind: 'pointer', seq: event.seq, x: event.x, y: event.y };
    case 'move': return { kind: 'move', seq: event.seq, dx: event.dx, dy: event.dy };
    // Key presses change the marker's colour; releases only count.
    case 'key': return event.down === false ? { kind: 'other', seq: event.seq } : { kind: 'key', seq: event.seq, key: event.key };
    default: return { kind: 'other', seq: event.seq };
  }
}
