// An X11 application as the frame source. At start-up the display comes up (Xvfb at the session's size,
// or STREAMING_DISPLAY) and the application starts on it; the container is ready only once the app has
// mapped a window. Each session captures the screen in this process whenever it changes
// (x11-capture.ts) and hands the frames, as I420, to the same encoder path as the scene, so the encoder
// processes stay swappable (a PLI still switches to a warm spare that starts with a keyframe). Input is
// injected with XTEST (x11-input.ts) on the same X connection; clipboard text goes both ways by the X
// selection protocol (x11-clipboard.ts).
import type { InputMessage } from '../client/protocol.ts';
import { Application } from './app.ts';
import type { Config } from './config.ts';
import type { FrameEncoder } from './encoder.ts';
import { FrameFeed, type FrameSource, type SourceEvents } from './frame-source.ts';
import type { Logger } from './logger.ts';
import { ScreenCapture } from './x11-capture.ts';
import { X11Clipboard } from './x11-clipboard.ts';
import { startXvfb, XConnection, type VirtualDisplay } from './x11-display.ts';
import { X11Input } from './x11-input.ts';

export class X11Source implements FrameSource {
  readonly kind = 'x11';
  readonly feed: FrameFeed;
  readonly app: Application;
  readonly display: string;
  readonly #x: XConnection;
  readonly #input: X11Input;
  readonly #capture: ScreenCapture;
  readonly #clipboard: X11Clipboard;
  readonly #server: VirtualDisplay | undefined;
  #closed = false;

  private constructor(options: {
    feed: FrameFeed; capture: ScreenCapture; clipboard: X11Clipboard; events: SourceEvents; encoder: FrameEncoder;
    x: XConnection; input: X11Input; server: VirtualDisplay | undefined; app: Application; display: string;
  }) {
    const { events, encoder } = options;
    this.feed = options.feed;
    this.#capture = options.capture;
    this.#clipboard = options.clipboard;
    this.#x = options.x;
    this.#input = options.input;
    this.#server = options.server;
    this.app = options.app;
    this.display = options.display;
    // A still screen sends no frames: a fresh encoder process (keyframe on PLI) must be given one.
    encoder.onAwaitingFrame = () => this.#capture.request();
    this.#x.onLost((why) => { if (!this.#closed) events.onFailure(why); });
    options.server?.child.once('exit', (code, signal) => { if (!this.#closed) events.onFailure(`Xvfb exited (${code ?? signal})`); });
  }

  /** Brings up the display and the application; rejects with one readable line when either fails. */
  static async open(config: Config, encoder: FrameEncoder, log: Logger, appEnv: Record<string, string>, events: SourceEvents): Promise<X11Source> {
    const { width, height } = config;
    const server = config.display ? undefined : await startXvfb(config.xvfbPath, width, height);
    const display = config.display ?? server?.display ?? '';
    let x: XConnection | undefined;
    let app: Application | undefined;
    try {
      x = await XConnection.open(display);
      if (x.width < width || x.height < height) throw new Error(`X display ${display} is ${x.width}x${x.height}, smaller than STREAMING_VIDEO_SIZE ${width}x${height}`);
      const input = await X11Input.create(x);
      log.info({ display, virtual: server !== undefined, width: x.width, height: x.height }, 'X display open');
      const started = app = new Application(config.appCommand ?? '', {
        ...appEnv, DISPLAY: display, STREAMING_VIDEO_WIDTH: String(width), STREAMING_VIDEO_HEIGHT: String(height), STREAMING_VIDEO_FPS: String(config.fps),
      }, log);
      const startedAt = performance.now();
      const window = await x.waitForWindow(config.appStartTimeoutMs, () => (started.exit ? `the application ${started.describeExit(' before showing a window')}` : undefined));
      log.info({ appPid: app.pid, ms: Math.round(performance.now() - startedAt) }, 'application window mapped');
      if (server) x.focus(window); // our own display has no window manager to give the app the keyboard
      const feed = new FrameFeed(encoder, width, height, config.barcode, true);
      const capture = await ScreenCapture.create(x, feed, {
        width, height, fps: config.fps, inputSeq: () => input.lastSeq, onFailure: (reason) => events.onFailure(reason),
      });
      log.info({ method: capture.method }, capture.method === 'shm' ? 'screen capture: MIT-SHM' : 'screen capture: core GetImage (no MIT-SHM on this display: slower)');
      const clipboard = await X11Clipboard.create(x, log, (text) => events.onClipboard(text));
      return new X11Source({ feed, capture, clipboard, events, encoder, x, input, server, app, display });
    } catch (error) {
      x?.close();
      await app?.stop();
      await server?.stop();
      throw error;
    }
  }

  prime(): void {
    this.feed.prime();
    this.#capture.start();
  }

  start(): void {
    this.feed.start();
    this.#capture.start();
  }

  stop(): void {
    this.feed.stop();
    this.#input.releaseAll();
    this.#capture.stop();
  }

  input(event: InputMessage): boolean {
    if (event.type === 'clipboard') {
      this.#clipboard.set(event.text);
      return true;
    }
    if (!this.#input.apply(event)) return false;
    // The cursor is drawn into the frame: a pointer that moved changes the picture without any damage.
    if (event.type === 'pointer' || event.type === 'move') this.#capture.request();
    return true;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.stop();
    this.#capture.close();
    this.#clipboard.close();
    this.#x.close();
    await this.app.stop();
    await this.#server?.stop();
  }
}
