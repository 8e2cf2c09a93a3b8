// Cuts a byte stream of back-to-back raw frames (fixed size, no headers) into frames, copying each
// straight into a pooled buffer of the feed. With no buffer free the frame's bytes are skipped: the
// stream is never paused, so the producer (a capture, an app) never blocks on a slow encoder.
import type { FrameFeed } from './frame-source.ts';

export class RawFrameReader {
  readonly #feed: FrameFeed;
  readonly #frameBytes: number;
  #buffer: Buffer | undefined;
  #filled = 0;
  /** performance.now() when the current frame's first byte arrived. */
  #startedAt = 0;
  /** Called with every complete frame's arrival time, before it is delivered. */
  onFrame?: (firstByteMs: number) => void;
  framesRead = 0;

  constructor(feed: FrameFeed) {
    this.#feed = feed;
    this.#frameBytes = feed.frameBytes;
  }

  push(chunk: Buffer): void {
    let offset = 0;
    while (offset < chunk.length) {
      if (this.#filled === 0) {
        this.#startedAt = performance.now();
        this.#buffer = this.#feed.wanted ? this.#feed.acquire() : undefined;
      }
      const take = Math.min(this.#frameBytes - this.#filled, chunk.length - offset);
      if (this.#buffer) chunk.copy(this.#buffer, this.#filled, offset, offset + take);
      this.#filled += take;
      offset += take;
      if (this.#filled < this.#frameBytes) continue;
      this.#filled = 0;
      this.framesRead++;
      this.onFrame?.(this.#startedAt);
      const buffer = this.#buffer;
      this.#buffer = undefined;
      if (buffer) this.#feed.deliver(buffer, this.#startedAt);
    }
  }
}
