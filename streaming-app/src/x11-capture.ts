// Screen capture of the x11 source, in this process, driven by change. The X DAMAGE extension reports
// when anything on the screen was drawn; the screen is then read at once with MIT-SHM GetImage (the
// server copies its framebuffer into a /dev/shm file this process reads back), and only the parts that
// changed (DAMAGE's region, and where the cursor was and is) are converted to I420 into a kept copy of the
// picture, which goes to the encoder. The pointer's cursor (XFIXES) is drawn in. A typed character is a
// frame in the feed a few ms after xterm draws it (docs/streaming-app.md has the measurements).
// Nothing is grabbed while the screen is still, except a frame a second to keep the stream alive and a
// frame whenever a fresh encoder process waits for one (a keyframe). Grabs are at most `fps` a second.
import { closeSync, ftruncateSync, openSync, readSync, unlinkSync } from 'node:fs';
import type { CursorImage, Rect, XEvent } from 'x11';
import type { FrameFeed } from './frame-source.ts';
import type { XConnection } from './x11-display.ts';

const Z_PIXMAP = 2;
const ALL_PLANES = 0xffffffff;
/** A still screen is still sent this often (FrameFeed sends an unchanged frame once a second). */
const HEARTBEAT_MS = 1000;
let segments = 0;

/** Where grabbed frames go: the FrameFeed, or a measuring probe (bench/stream/capture.ts). */
export type FrameSink = Pick<FrameFeed, 'frameBytes' | 'wanted' | 'acquire' | 'deliver' | 'inputSeq'>;

export type CaptureOptions = {
  width: number;
  height: number;
  fps: number;
  /** The newest input injected on this connection: a grab requested after it reflects it. */
  inputSeq: () => number;
  onFailure: (reason: string) => void;
};

export class ScreenCapture {
  /** `shm`: MIT-SHM into a shared file; `core`: GetImage over the socket (a display without MIT-SHM). */
  readonly method: 'shm' | 'core';
  readonly #x: XConnection;
  readonly #sink: FrameSink;
  readonly #options: CaptureOptions;
  readonly #intervalMs: number;
  readonly #segment: { id: number; fd: number } | undefined;
  /** The screen as last read (BGRX, cursor drawn in), and the picture as I420. */
  readonly #screen: Buffer;
  readonly #picture: Buffer;
  #damage: number | undefined;
  /** XFIXES region that receives the damage each grab repairs. */
  #parts = 0;
  #cursor: CursorImage | undefined;
  #cursorRect: Rect | undefined;
  #wholeScreen = true;
  #timer: NodeJS.Timeout | undefined;
  #heartbeat: NodeJS.Timeout | undefined;
  #inFlight = false;
  #again = false;
  #closed = false;
  #lastGrabMs = -Infinity;

  private constructor(x: XConnection, sink: FrameSink, options: CaptureOptions, segment: { id: number; fd: number } | undefined) {
    this.#x = x;
    this.#sink = sink;
    this.#options = options;
    this.#intervalMs = 1000 / options.fps;
    this.#segment = segment;
    this.method = segment ? 'shm' : 'core';
    this.#screen = Buffer.alloc(options.width * options.height * 4);
    this.#picture = Buffer.alloc(sink.frameBytes);
    x.client.on('event', this.#onEvent);
  }

  /** Sets up the shared segment when the display allows it (same host, MIT-SHM 1.2, /dev/shm). */
  static async create(x: XConnection, sink: FrameSink, options: CaptureOptions): Promise<ScreenCapture> {
    const segment = await attachSegment(x, options.width * options.height * 4).catch(() => undefined);
    return new ScreenCapture(x, sink, options, segment);
  }

  /** Starts watching the screen; the first frame is grabbed at once. */
  start(): void {
    if (this.#damage === undefined) {
      const { client, damage, fixes, root } = this.#x;
      this.#damage = client.AllocID();
      this.#parts = client.AllocID();
      damage.Create(this.#damage, root, damage.ReportLevel.NonEmpty);
      fixes.CreateRegion(this.#parts, []);
      fixes.SelectCursorInput(root, fixes.CursorNotifyMask.DisplayCursor);
      this.#wholeScreen = true; // what changed while nobody watched is unknown
    }
    this.request();
  }

  stop(): void {
    if (this.#damage !== undefined) {
      const { damage, fixes, root } = this.#x;
      damage.Destroy(this.#damage);
      fixes.DestroyRegion(this.#parts);
      fixes.SelectCursorInput(root, 0);
    }
    this.#damage = undefined;
    clearTimeout(this.#timer);
    clearTimeout(this.#heartbeat);
    this.#timer = undefined;
    this.#again = false;
  }

  close(): void {
    this.#closed = true;
    this.stop();
    this.#x.client.removeListener('event', this.#onEvent);
    if (this.#segment) closeSync(this.#segment.fd); // the server unmaps it with the connection
  }

  /** The screen may have changed (or a frame is needed): grab one as soon as the frame rate allows. */
  request(): void {
    if (this.#damage === undefined || this.#timer) return;
    if (this.#inFlight) {
      this.#again = true;
      return;
    }
    const wait = this.#lastGrabMs + this.#intervalMs - performance.now();
    if (wait > 0) this.#timer = setTimeout(this.#grab, wait);
    else this.#grab();
  }

  #onEvent = (event: XEvent): void => {
    if ((event.name === 'DamageNotify' && event.damage === this.#damage) || event.name === 'CursorNotify') this.request();
  };

  #grab = (): void => {
    this.#timer = undefined;
    if (this.#damage === undefined || this.#inFlight || !this.#sink.wanted) return;
    this.#lastGrabMs = performance.now();
    const buffer = this.#sink.acquire();
    if (!buffer) {
      this.request(); // every buffer is still with the encoder: try again a frame later
      return;
    }
    this.#inFlight = true;
    const startedMs = this.#lastGrabMs;
    const inputSeq = this.#options.inputSeq();
    const { client, damage, fixes, shm, root } = this.#x;
    const { width, height } = this.#options;
    // The damage is moved into #parts and emptied before the image is taken: whatever is drawn from
    // here on reports itself again. The replies come in request order, the image last.
    let changed: Rect[] = [];
    damage.Subtract(this.#damage, 0, this.#parts);
    fixes.FetchRegion(this.#parts, (error, region) => {
      if (error) this.#wholeScreen = true;
      else changed = region.rectangles;
    });
    fixes.GetCursorImage((error, cursor) => { if (!error) this.#cursor = cursor; });
    const done = (error: Error | null, readRows: (top: number, bottom: number) => void): void => {
      this.#inFlight = false;
      if (this.#closed) return;
      if (error) {
        this.#options.onFailure(`screen capture failed: ${error.message}`);
        return;
      }
      this.#update(changed, readRows);
      this.#picture.copy(buffer);
      this.#sink.inputSeq = inputSeq;
      const taken = this.#sink.deliver(buffer, startedMs);
      if (this.#damage === undefined) return; // stopped meanwhile
      clearTimeout(this.#heartbeat);
      this.#heartbeat = setTimeout(() => this.request(), HEARTBEAT_MS);
      if (!taken || this.#again) {
        this.#again = false;
        this.request();
      }
    };
    const segment = this.#segment;
    const rowBytes = width * 4;
    if (segment && shm) {
      shm.GetImage(root, 0, 0, width, height, ALL_PLANES, Z_PIXMAP, segment.id, 0, (error) => done(error, (top, bottom) => {
        readSync(segment.fd, this.#screen, top * rowBytes, (bottom - top) * rowBytes, top * rowBytes);
      }));
    } else {
      client.GetImage(Z_PIXMAP, root, 0, 0, width, height, ALL_PLANES, (error, image) => done(error, (top, bottom) => {
        image.data.copy(this.#screen, top * rowBytes, top * rowBytes, bottom * rowBytes);
      }));
    }
  };

  /** Brings the picture up to date where the screen changed and where the cursor was and is. */
  #update(changed: Rect[], readRows: (top: number, bottom: number) => void): void {
    const { width, height } = this.#options;
    const cursorRect = this.#cursor && clip(cursorBounds(this.#cursor), width, height);
    const dirty = (this.#wholeScreen ? [{ x: 0, y: 0, width, height }] : [...changed, this.#cursorRect, cursorRect])
      .filter((rect): rect is Rect => rect !== undefined)
      .map((rect) => clip(toEven(rect), width, height))
      .filter((rect) => rect.width > 0 && rect.height > 0);
    this.#wholeScreen = false;
    if (dirty.length === 0) return;
    readRows(Math.min(...dirty.map((r) => r.y)), Math.max(...dirty.map((r) => r.y + r.height)));
    if (this.#cursor) drawCursor(this.#screen, width, height, this.#cursor);
    this.#cursorRect = cursorRect;
    for (const rect of dirty) bgrxToI420(this.#screen, this.#picture, width, height, rect);
  }
}

function cursorBounds(cursor: CursorImage): Rect {
  return { x: cursor.x - cursor.xhot, y: cursor.y - cursor.yhot, width: cursor.width, height: cursor.height };
}

/** Widened to even coordinates: I420 keeps one chroma sample per 2×2 pixels. */
function toEven(rect: Rect): Rect {
  const x = rect.x & ~1;
  const y = rect.y & ~1;
  return { x, y, width: ((rect.x + rect.width + 1) & ~1) - x, height: ((rect.y + rect.height + 1) & ~1) - y };
}

function clip(rect: Rect, width: number, height: number): Rect {
  const x = Math.max(0, rect.x);
  const y = Math.max(0, rect.y);
  return { x, y, width: Math.max(0, Math.min(width, rect.x + rect.width) - x), height: Math.max(0, Math.min(height, rect.y + rect.height) - y) };
}

/** Blends the cursor (premultiplied ARGB, the same byte order as the screen) over the screen. */
function drawCursor(screen: Buffer, width: number, height: number, cursor: CursorImage): void {
  const image = cursor.cursorImage;
  const { x: left, y: top } = cursorBounds(cursor);
  for (let row = Math.max(0, -top); row < cursor.height && top + row < height; row++) {
    for (let col = Math.max(0, -left); col < cursor.width && left + col < width; col++) {
      const s = (row * cursor.width + col) * 4;
      const alpha = image[s + 3];
      if (alpha === 0) continue;
      const d = ((top + row) * width + left + col) * 4;
      for (let c = 0; c < 3; c++) screen[d + c] = image[s + c] + Math.round((screen[d + c] * (255 - alpha)) / 255);
    }
  }
}

/**
 * BGRX to I420 (BT.601, video range, as the rest of the pipeline) for one rectangle with even edges;
 * chroma is the average of each 2×2 block.
 */
export function bgrxToI420(screen: Buffer, picture: Buffer, width: number, height: number, rect: Rect): void {
  const uPlane = width * height;
  const vPlane = uPlane + (width / 2) * (height / 2);
  for (let y = rect.y; y < rect.y + rect.height; y += 2) {
    let top = (y * width + rect.x) * 4;
    let bottom = top + width * 4;
    let luma = y * width + rect.x;
    let chroma = (y / 2) * (width / 2) + rect.x / 2;
    for (let x = 0; x < rect.width; x += 2) {
      const b0 = screen[top], g0 = screen[top + 1], r0 = screen[top + 2];
      const b1 = screen[top + 4], g1 = screen[top + 5], r1 = screen[top + 6];
      const b2 = screen[bottom], g2 = screen[bottom + 1], r2 = screen[bottom + 2];
      const b3 = screen[bottom + 4], g3 = screen[bottom + 5], r3 = screen[bottom + 6];
      picture[luma] = ((66 * r0 + 129 * g0 + 25 * b0 + 128) >> 8) + 16;
      picture[luma + 1] = ((66 * r1 + 129 * g1 + 25 * b1 + 128) >> 8) + 16;
      picture[luma + width] = ((66 * r2 + 129 * g2 + 25 * b2 + 128) >> 8) + 16;
      picture[luma + width + 1] = ((66 * r3 + 129 * g3 + 25 * b3 + 128) >> 8) + 16;
      const r = r0 + r1 + r2 + r3;
      const g = g0 + g1 + g2 + g3;
      const b = b0 + b1 + b2 + b3;
      picture[uPlane + chroma] = ((-38 * r - 74 * g + 112 * b + 512) >> 10) + 128;
      picture[vPlane + chroma] = ((112 * r - 94 * g - 18 * b + 512) >> 10) + 128;
      top += 8;
      bottom += 8;
      luma += 2;
      chroma++;
    }
  }
}

/**
 * A shared segment the size of the screen: an unlinked /dev/shm file the server maps (MIT-SHM 1.2
 * AttachFd, the descriptor passed over the unix socket) and this process reads with pread.
 */
async function attachSegment(x: XConnection, size: number): Promise<{ id: number; fd: number }> {
  const { shm, client } = x;
  if (!shm?.fdCapable || shm.major * 100 + shm.minor < 102) throw new Error('MIT-SHM 1.2 with descriptor passing is not available');
  const path = `/dev/shm/svc-capture-${process.pid}-${segments++}`;
  const fd = openSync(path, 'w+', 0o600);
  try {
    unlinkSync(path);
    ftruncateSync(fd, size);
    const id = client.AllocID();
    await new Promise<void>((resolve, reject) => shm.AttachFd(id, fd, false, (error) => (error ? reject(error) : resolve())));
    return { id, fd };
  } catch (error) {
    closeSync(fd);
    throw error;
  }
}
