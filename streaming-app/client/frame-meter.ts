// Reads the frame barcode from every frame the browser presents (requestVideoFrameCallback) and turns it
// into measurements: frames seen, session setup time (new WebSocket to first decoded frame) and
// input-to-photon latency (input event sent to the first frame that reflects it).
import { BARCODE_CELLS, BARCODE_ROWS, decodeBarcode, shownBarcodeLayout } from './barcode.ts';
import { FrameTiming, type ReadFrame } from './frame-timing.ts';

const MAX_SAMPLES = 600;

function push(samples: number[], value: number): void {
  if (samples.length === MAX_SAMPLES) samples.shift();
  samples.push(value);
}

export type FrameMeterSnapshot = {
  framesPresented: number;
  framesDecodedFromBarcode: number;
  lastFrameNumber: number | undefined;
  lastInputSeq: number | undefined;
  /** New WebSocket to first presented frame, ms (undefined until the first frame). */
  setupMs: number | undefined;
  inputToPhotonMs: number[];
  inputToReceiveMs: number[];
  inputToPresentMs: number[];
};

export class FrameMeter {
  readonly #video: HTMLVideoElement;
  readonly #canvas: HTMLCanvasElement;
  readonly #ctx: CanvasRenderingContext2D;
  readonly #pendingInputs = new Map<number, number>();
  readonly #timing = new FrameTiming();
  #connectStartedAt: number | undefined;
  #running = false;
  framesPresented = 0;
  framesDecodedFromBarcode = 0;
  lastFrameNumber: number | undefined;
  lastInputSeq: number | undefined;
  setupMs: number | undefined;
  readonly inputToPhotonMs: number[] = [];
  readonly inputToReceiveMs: number[] = [];
  readonly inputToPresentMs: number[] = [];
  onFrame?: (frameNumber: number) => void;
  /** The width the app draws its barcode for (its configured video width); frames may come smaller. */
  sourceWidth: number | undefined;

  constructor(video: HTMLVideoElement) {
    this.#video = video;
    this.#canvas = document.createElement('canvas');
    this.#canvas.width = BARCODE_CELLS;
    this.#canvas.height = BARCODE_ROWS;
    const ctx = this.#canvas.getContext('2d', { willReadFrequently: true });
    if (!ctx) throw new Error('2d canvas unavailable');
    // Nearest-neighbour: each of the 32x2 canvas pixels samples the centre of one barcode cell.
    ctx.imageSmoothingEnabled = false;
    this.#ctx = ctx;
  }

  /** Marks the start of a (new, not resumed) session setup. */
  connecting(): void {
    this.#connectStartedAt = performance.now();
    this.setupMs = undefined;
  }

  /** Remembers when input `seq` was sent; its latency is taken when a frame shows it. */
  inputSent(seq: number, at: number): void {
    this.#pendingInputs.set(seq, at);
  }

  start(): void {
    if (this.#running) return;
    this.#running = true;
    const step = (_now: number, metadata: VideoFrameCallbackMetadata): void => {
      this.#measure(metadata);
      this.#video.requestVideoFrameCallback(step);
    };
    this.#video.requestVideoFrameCallback(step);
  }

  #measure(metadata: VideoFrameCallbackMetadata): void {
    this.framesPresented++;
    if (this.setupMs === undefined && this.#connectStartedAt !== undefined) this.setupMs = metadata.expectedDisplayTime - this.#connectStartedAt;
    const width = metadata.width;
    if (!width) return;
    const frame = this.#readBarcode(shownBarcodeLayout(this.sourceWidth ?? width, width));
    const inputSeq = this.#timing.shown(metadata.mediaTime, frame);
    if (inputSeq !== undefined) this.#inputsShown(inputSeq, metadata);
    if (!frame) return;
    this.framesDecodedFromBarcode++;
    this.lastFrameNumber = frame.frameNumber;
    this.lastInputSeq = frame.inputSeq;
    this.onFrame?.(frame.frameNumber);
  }

  /** The barcode of the video's current frame, with that frame's timestamp where WebCodecs can tell it. */
  #readBarcode(layout: { width: number; height: number }): (ReadFrame & { frameNumber: number }) | undefined {
    let frame: VideoFrame | undefined;
    try {
      frame = new VideoFrame(this.#video);
    } catch {
      // no WebCodecs (not a secure context): the element's frame, timed by this callback
    }
    this.#ctx.drawImage(frame ?? this.#video, 0, 0, layout.width, layout.height, 0, 0, BARCODE_CELLS, BARCODE_ROWS);
    const timestampUs = frame?.timestamp;
    frame?.close();
    // Red channel of RGBA: cells are grey, any channel carries the brightness.
    const decoded = decodeBarcode(this.#ctx.getImageData(0, 0, BARCODE_CELLS, BARCODE_ROWS).data, 4);
    return decoded && { ...decoded, timestampUs };
  }

  /** Input up to `inputSeq` is on screen in the frame `metadata` describes. */
  #inputsShown(inputSeq: number, metadata: VideoFrameCallbackMetadata): void {
    for (const [seq, sentAt] of this.#pendingInputs) {
      if (seq > inputSeq) continue;
      this.#pendingInputs.delete(seq);
      // Only the newest shown input is a clean sample; older ones were overtaken while in flight.
      if (seq !== inputSeq) continue;
      // The moment the frame is expected on screen is the best "photon" time a page can know.
      push(this.inputToPhotonMs, metadata.expectedDisplayTime - sentAt);
      // Where the time went: until the frame's last packet arrived, and until it was handed to the compositor.
      if (metadata.receiveTime !== undefined) push(this.inputToReceiveMs, metadata.receiveTime - sentAt);
      push(this.inputToPresentMs, metadata.presentationTime - sentAt);
    }
  }

  snapshot(): FrameMeterSnapshot {
    return {
      framesPresented: this.framesPresented,
      framesDecodedFromBarcode: this.framesDecodedFromBarcode,
      lastFrameNumber: this.lastFrameNumber,
      lastInputSeq: this.lastInputSeq,
      setupMs: this.setupMs,
      inputToPhotonMs: [...this.inputToPhotonMs],
      inputToReceiveMs: [...this.inputToReceiveMs],
      inputToPresentMs: [...this.inputToPresentMs],
    };
  }
}
