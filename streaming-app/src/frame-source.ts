// Where frames come from, behind one small interface: the built-in scene (scene-source), an X11
// application captured once per session (x11-source), or raw frames an off-screen renderer writes to a
// socket (pipe-source). Every source delivers I420 frames into FrameFeed, which owns the buffer pool,
// numbers the frames, stamps the barcode, and hands them to the one encoder path, so the warm-spare
// keyframe trick works the same for all of them.
import { barcodeLayout, encodeBarcode, LUMA_ONE, LUMA_ZERO } from '../client/barcode.ts';
import type { InputMessage } from '../client/protocol.ts';
import type { Application } from './app.ts';
import type { SourceKind } from './config.ts';
import type { FrameEncoder } from './encoder.ts';

export interface FrameSource {
  readonly kind: SourceKind;
  readonly feed: FrameFeed;
  /** The application behind the frames (x11, pipe); its exit ends the session. */
  readonly app?: Application;
  /** Session start: the next frame primes the encoder's warm spare (a capture starts here). */
  prime(): void;
  /** The peer connected: frames flow to the encoder. */
  start(): void;
  /** The session is over: no more frames. */
  stop(): void;
  /** Applies one validated input event; false when it cannot be applied (counted as dropped). */
  input(event: InputMessage): boolean;
  /** Stops what the source started (app, display, capture); safe to call more than once. */
  close(): Promise<void>;
}

export type SourceEvents = {
  /** The source cannot go on (display lost, capture failed): the session ends with an error. */
  onFailure(reason: string): void;
  /** Text was copied in the application (x11): it goes to the browser's clipboard. */
  onClipboard(text: string): void;
};

const POOL_SIZE = 3;
/** A source that skips unchanged frames still sends one this often, so the stream never looks dead. */
const UNCHANGED_REFRESH_MS = 1000;

/**
 * Frames into the encoder. A buffer is reused only once ffmpeg has taken all of its bytes; when none is
 * free or the encoder is behind, the frame is skipped rather than queued, so a slow encoder costs frame
 * rate, never latency.
 */
export class FrameFeed {
  readonly frameBytes: number;
  readonly #encoder: FrameEncoder;
  readonly #free: Buffer[] = [];
  readonly #stamp: ((frame: Buffer, frameNumber: number, inputSeq: number) => void) | undefined;
  /** The last frame sent to the encoder (before its barcode), when unchanged frames are skipped. */
  readonly #previous: Buffer | undefined;
  #previousAt = -Infinity;
  #mode: 'idle' | 'priming' | 'running' = 'idle';
  frameNumber = 0;
  /** Sequence number of the newest input the next frame reflects (carried by the barcode). */
  inputSeq = 0;
  framesSubmitted = 0;
  framesSkipped = 0;
  framesUnchanged = 0;

  /**
   * `skipUnchanged`: a captured desktop is mostly still; frames identical to the last one sent are not
   * encoded (except to answer a keyframe request, and once a second), which leaves the encoder idle and
   * the CPU free for the frames that carry a change.
   */
  constructor(encoder: FrameEncoder, width: number, height: number, barcode: boolean, skipUnchanged = false) {
    this.#encoder = encoder;
    this.frameBytes = (width * height * 3) / 2;
    this.#stamp = barcode ? barcodeStamper(width, height) : undefined;
    this.#previous = skipUnchanged ? Buffer.allocUnsafeSlow(this.frameBytes) : undefined;
    for (let i = 0; i < POOL_SIZE; i++) this.#free.push(Buffer.allocUnsafeSlow(this.frameBytes));
  }

  /** True while a frame would be used (priming or running); sources may skip work otherwise. */
  get wanted(): boolean {
    return this.#mode !== 'idle';
  }

  get running(): boolean {
    return this.#mode === 'running';
  }

  prime(): void {
    if (this.#mode === 'idle') this.#mode = 'priming';
  }

  start(): void {
    this.#mode = 'running';
  }

  stop(): void {
    this.#mode = 'idle';
  }

  /** A free buffer to fill, or undefined (then skip this frame). */
  acquire(): Buffer | undefined {
    const buffer = this.#free.pop();
    if (!buffer) this.framesSkipped++;
    return buffer;
  }

  /**
   * Hands a filled buffer on; it comes back to the pool once the encoder has taken it. False when the
   * encoder was too busy to take it: a source that sends frames only on change must send this one again.
   */
  deliver(buffer: Buffer, captureMs: number): boolean {
    const release = (): void => { this.#free.push(buffer); };
    if (this.#mode === 'idle') {
      release();
      return true;
    }
    if (this.#unchanged(buffer)) {
      release();
      this.framesUnchanged++;
      return true;
    }
    const frameNumber = ++this.frameNumber;
    this.#stamp?.(buffer, frameNumber, this.inputSeq);
    if (this.#mode === 'priming') {
      // The first frame of the session goes to the warm spare; later ones wait for the peer.
      if (!this.#encoder.prime(buffer, frameNumber, captureMs, release)) release();
      return true;
    }
    if (this.#encoder.submit(buffer, frameNumber, captureMs, release)) {
      this.framesSubmitted++;
      return true;
    }
    release();
    this.framesSkipped++;
    this.#previousAt = -Infinity; // the encoder never saw this change: the next frame must go
    return false;
  }

  /** True when the frame repeats the last one sent; otherwise it becomes the one to compare with. */
  #unchanged(frame: Buffer): boolean {
    const previous = this.#previous;
    if (!previous || this.#mode !== 'running') return false;
    const now = performance.now();
    if (!this.#encoder.awaitingFrame && now - this.#previousAt < UNCHANGED_REFRESH_MS && previous.equals(frame)) return true;
    frame.copy(previous);
    this.#previousAt = now;
    return false;
  }
}

/** Writes the frame barcode (see client/barcode.ts) into the top strip of an I420 frame. */
export function barcodeStamper(width: number, height: number): (frame: Buffer, frameNumber: number, inputSeq: number) => void {
  const { cellWidth, cellHeight } = barcodeLayout(width);
  const bits = new Uint8Array(64);
  const uOffset = width * height;
  const vOffset = uOffset + (width / 2) * (height / 2);
  return (frame, frameNumber, inputSeq) => {
    encodeBarcode(frameNumber, inputSeq, bits);
    for (let i = 0; i < 64; i++) {
      const x0 = (i % 32) * cellWidth;
      const y0 = Math.floor(i / 32) * cellHeight;
      const luma = bits[i] ? LUMA_ONE : LUMA_ZERO;
      for (let row = y0; row < y0 + cellHeight; row++) frame.fill(luma, row * width + x0, row * width + x0 + cellWidth);
      for (let row = y0 >> 1; row < (y0 + cellHeight) >> 1; row++) {
        const start = row * (width / 2) + (x0 >> 1);
        frame.fill(128, uOffset + start, uOffset + start + (cellWidth >> 1));
        frame.fill(128, vOffset + start, vOffset + start + (cellWidth >> 1));
      }
    }
  };
}
