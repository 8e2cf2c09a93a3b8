// The demo scene, drawn straight into I420 (the encoder's input format, so no colour conversion per
// frame): a background, a block sweeping left and right so the picture is never static, a marker that
// follows the browser's pointer and changes colour on key presses, and the frame barcode strip.
// This is the part a team replaces with its own GPU renderer.
import { barcodeLayout } from '../client/barcode.ts';
import { barcodeStamper } from './frame-source.ts';

type Yuv = { y: number; u: number; v: number };

/** BT.601 limited range, what the encoder and the browser assume for untagged 4:2:0 video. */
function rgbToYuv(r: number, g: number, b: number): Yuv {
  return {
    y: Math.round(16 + 0.257 * r + 0.504 * g + 0.098 * b),
    u: Math.round(128 - 0.148 * r - 0.291 * g + 0.439 * b),
    v: Math.round(128 + 0.439 * r - 0.368 * g - 0.071 * b),
  };
}

const MARKER_COLOURS: Yuv[] = [
  rgbToYuv(255, 80, 40), rgbToYuv(40, 200, 90), rgbToYuv(60, 120, 255), rgbToYuv(250, 210, 40),
  rgbToYuv(220, 60, 220), rgbToYuv(40, 220, 230), rgbToYuv(255, 255, 255), rgbToYuv(255, 140, 0), rgbToYuv(150, 90, 255),
];
const BACKGROUND = rgbToYuv(28, 32, 44);
const SWEEPER = rgbToYuv(90, 96, 110);
const SWEEP_PERIOD_MS = 2000;

export type SceneInput =
  | { kind: 'pointer'; seq: number; x: number; y: number }
  /** A relative move in pixels (pointer lock). */
  | { kind: 'move'; seq: number; dx: number; dy: number }
  | { kind: 'key'; seq: number; key: string }
  /** Any other input: only its sequence number counts (the barcode shows it arrived). */
  | { kind: 'other'; seq: number };

export class Scene {
  readonly width: number;
  readonly height: number;
  /** Bytes of one I420 frame. */
  readonly frameBytes: number;
  readonly #chromaWidth: number;
  readonly #uOffset: number;
  readonly #vOffset: number;
  readonly #barcodeHeight: number;
  readonly #stampBarcode: ((frame: Buffer, frameNumber: number, inputSeq: number) => void) | undefined;
  readonly #markerSize: number;
  readonly #sweeperSize: number;
  #pointerX = 0.5;
  #pointerY = 0.5;
  #colour = 0;
  #lastInputSeq = 0;

  constructor(width: number, height: number, barcode = true) {
    this.width = width;
    this.height = height;
    this.#chromaWidth = width / 2;
    this.#uOffset = width * height;
    this.#vOffset = this.#uOffset + (width / 2) * (height / 2);
    this.frameBytes = this.#vOffset + (width / 2) * (height / 2);
    this.#barcodeHeight = barcodeLayout(width).height;
    this.#stampBarcode = barcode ? barcodeStamper(width, height) : undefined;
    this.#markerSize = Math.max(8, 2 * Math.round(height / 24));
    this.#sweeperSize = Math.max(8, 2 * Math.round(height / 20));
  }

  /** Sequence number of the newest input event applied; stamped into every frame's barcode. */
  get lastInputSeq(): number {
    return this.#lastInputSeq;
  }

  apply(input: SceneInput): void {
    if (input.kind === 'pointer') {
      this.#pointerX = Math.min(1, Math.max(0, input.x));
      this.#pointerY = Math.min(1, Math.max(0, input.y));
    } else if (input.kind === 'move') {
      this.#pointerX = Math.min(1, Math.max(0, this.#pointerX + input.dx / this.width));
      this.#pointerY = Math.min(1, Math.max(0, this.#pointerY + input.dy / this.height));
    } else if (input.kind === 'key') {
      // Digits pick a colour; any other key steps to the next one.
      const digit = /^[1-9]$/.test(input.key) ? Number(input.key) - 1 : -1;
      this.#colour = digit >= 0 ? digit % MARKER_COLOURS.length : (this.#colour + 1) % MARKER_COLOURS.length;
    }
    if (input.seq > this.#lastInputSeq) this.#lastInputSeq = input.seq;
  }

  /** Draws the whole frame into `out` (frameBytes long); called once per frame tick. */
  render(out: Buffer, frameNumber: number, timeMs: number): void {
    const { width, height } = this;
    out.fill(BACKGROUND.y, 0, this.#uOffset);
    out.fill(BACKGROUND.u, this.#uOffset, this.#vOffset);
    out.fill(BACKGROUND.v, this.#vOffset, this.frameBytes);

    const top = this.#barcodeHeight;
    const sweep = this.#sweeperSize;
    const phase = (timeMs % SWEEP_PERIOD_MS) / SWEEP_PERIOD_MS;
    const sweepX = Math.round((phase < 0.5 ? phase * 2 : 2 - phase * 2) * (width - sweep));
    this.#fillRect(out, sweepX, height - sweep - 8, sweep, sweep, SWEEPER);

    const m = this.#markerSize;
    const mx = Math.round(this.#pointerX * (width - m));
    const my = top + Math.round(this.#pointerY * (height - top - m));
    this.#fillRect(out, mx, my, m, m, MARKER_COLOURS[this.#colour]);

    this.#stampBarcode?.(out, frameNumber, this.#lastInputSeq);
  }

  #fillRect(out: Buffer, x: number, y: number, w: number, h: number, colour: Yuv): void {
    const x0 = Math.max(0, x);
    const y0 = Math.max(0, y);
    const x1 = Math.min(this.width, x + w);
    const y1 = Math.min(this.height, y + h);
    if (x1 <= x0 || y1 <= y0) return;
    for (let row = y0; row < y1; row++) out.fill(colour.y, row * this.width + x0, row * this.width + x1);
    const cw = this.#chromaWidth;
    const cx0 = x0 >> 1;
    const cx1 = (x1 + 1) >> 1;
    for (let row = y0 >> 1; row < (y1 + 1) >> 1; row++) {
      out.fill(colour.u, this.#uOffset + row * cw + cx0, this.#uOffset + row * cw + cx1);
      out.fill(colour.v, this.#vOffset + row * cw + cx0, this.#vOffset + row * cw + cx1);
    }
  }
}
