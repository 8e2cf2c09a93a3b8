// Screen capture of the x11 source, in this process, driven by change. The X DAMAGE extension reports
// when anything on the screen was drawn; the screen is then read at once with MIT-SHM GetImage (the
// server copies its framebuffer into a /dev/shm file this process reads back), the pointer's cursor
// (XFIXES) is drawn in, and the frame goes straight to the encoder as BGRX. A screen change is a frame
// in the feed about 2 ms later (docs/streaming-app.md has the figures; ffmpeg's x11grab took 15-35 ms).
// Nothing is grabbed while the screen is still, except a frame a second to keep the stream alive and a
// frame whenever a fresh encoder process waits for one (a keyframe). Grabs are at most `fps` a second.
import { closeSync, ftruncateSync, openSync, readSync, unlinkSync } from 'node:fs';
import type { CursorImage, XEvent } from 'x11';
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
  #damage: number | undefined;
  #cursor: CursorImage | undefined;
  #timer: NodeJS.Timeout | undefined;
  #heartbeat: NodeJS.Timeout | undefined;
  #inFlight = false;
  #again = false;
  #lastGrabMs = -Infinity;
  #closed = false;
  grabs = 0;

  private constructor(x: XConnection, sink: FrameSink, options: CaptureOptions, segment: { id: number; fd: number } | undefined) {
    this.#x = x;
    this.#sink = sink;
    this.#options = options;
    this.#intervalMs = 1000 / options.fps;
    this.#segment = segment;
    this.method = segment ? 'shm' : 'core';
    x.client.on('event', this.#onEvent);
  }

  /** Sets up the shared segment when the display allows it (same host, MIT-SHM 1.2, /dev/shm). */
  static async create(x: XConnection, sink: FrameSink, options: CaptureOptions): Promise<ScreenCapture> {
    const segment = await attachSegment(x, sink.frameBytes).catch(() => undefined);
    return new ScreenCapture(x, sink, options, segment);
  }

  /** Starts watching the screen; the first frame is grabbed at once. */
  start(): void {
    if (this.#damage === undefined) {
      const { client, damage, fixes, root } = this.#x;
      this.#damage = client.AllocID();
      damage.Create(this.#damage, root, damage.ReportLevel.NonEmpty);
      fixes.SelectCursorInput(root, fixes.CursorNotifyMask.DisplayCursor);
    }
    this.request();
  }

  stop(): void {
    if (this.#damage !== undefined) {
      this.#x.damage.Destroy(this.#damage);
      this.#x.fixes.SelectCursorInput(this.#x.root, 0);
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
    // Emptied before the image is taken: whatever is drawn from here on reports itself again.
    damage.Subtract(this.#damage, 0, 0);
    fixes.GetCursorImage((error, cursor) => { if (!error) this.#cursor = cursor; });
    const done = (error: Error | null, copy: () => void): void => {
      this.#inFlight = false;
      if (this.#closed) return;
      if (error) {
        this.#options.onFailure(`screen capture failed: ${error.message}`);
        return;
      }
      copy();
      this.#drawCursor(buffer);
      this.grabs++;
      this.#sink.inputSeq = inputSeq;
      const taken = this.#sink.deliver(buffer, startedMs);
      clearTimeout(this.#heartbeat);
      this.#heartbeat = setTimeout(() => this.request(), HEARTBEAT_MS);
      if (!taken || this.#again) {
        this.#again = false;
        this.request();
      }
    };
    const segment = this.#segment;
    if (segment && shm) {
      shm.GetImage(root, 0, 0, width, height, ALL_PLANES, Z_PIXMAP, segment.id, 0, (error) => {
        done(error, () => readSync(segment.fd, buffer, 0, buffer.length, 0));
      });
    } else {
      client.GetImage(Z_PIXMAP, root, 0, 0, width, height, ALL_PLANES, (error, image) => done(error, () => image.data.copy(buffer)));
    }
  };

  /** Blends the cursor (premultiplied ARGB, the same byte order as the frame) over the frame. */
  #drawCursor(frame: Buffer): void {
    const cursor = this.#cursor;
    if (!cursor) return;
    const { width, height } = this.#options;
    const image = cursor.cursorImage;
    const left = cursor.x - cursor.xhot;
    const top = cursor.y - cursor.yhot;
    for (let row = Math.max(0, -top); row < cursor.height && top + row < height; row++) {
      for (let col = Math.max(0, -left); col < cursor.width && left + col < width; col++) {
        const s = (row * cursor.width + col) * 4;
        const alpha = image[s + 3];
        if (alpha === 0) continue;
        const d = ((top + row) * width + left + col) * 4;
        for (let c = 0; c < 3; c++) frame[d + c] = image[s + c] + Math.round((frame[d + c] * (255 - alpha)) / 255);
      }
    }
  }
}

/**
 * A shared segment the size of a frame: an unlinked /dev/shm file the server maps (MIT-SHM 1.2 AttachFd,
 * the descriptor passed over the unix socket) and this process reads with pread.
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
