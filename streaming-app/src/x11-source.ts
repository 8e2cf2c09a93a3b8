// An X11 application as the frame source. At start-up the display comes up (Xvfb at the session's size,
// or STREAMING_DISPLAY) and the application starts on it; the container is ready only once the app has
// mapped a window. Each session captures the display once: one long-lived `ffmpeg -f x11grab` converts to
// I420 and writes raw frames on a pipe, and those frames go through the same encoder path as the scene,
// so the encoder processes stay swappable (a PLI still switches to a warm spare that starts with a
// keyframe). Input is injected with XTEST (x11-input.ts).
import type { ChildProcess } from 'node:child_process';
import type { InputMessage } from '../client/protocol.ts';
import { Application } from './app.ts';
import { exited, spawnChild, stopChild } from './children.ts';
import type { Config } from './config.ts';
import type { VideoEncoder } from './encoder.ts';
import { FrameFeed, type FrameSource, type SourceEvents } from './frame-source.ts';
import { LineTail } from './line-tail.ts';
import type { Logger } from './logger.ts';
import { RawFrameReader } from './raw-frames.ts';
import { startXvfb, XConnection, type VirtualDisplay } from './x11-display.ts';
import { X11Input } from './x11-input.ts';

/**
 * The x11grab capture: raw I420 frames on stdout, at the session's size and rate, cursor drawn in. The
 * grab times are kept in microseconds: in the default 1/fps time base, two grabs closer than a frame
 * interval (the grabber catching up after a late frame) share a timestamp, and ffmpeg drops the second.
 */
export function captureArgs(display: string, width: number, height: number, fps: number): string[] {
  return ['-hide_banner', '-loglevel', 'error', '-nostdin',
    '-f', 'x11grab', '-framerate', String(fps), '-video_size', `${width}x${height}`, '-draw_mouse', '1', '-i', `${display}+0,0`,
    '-pix_fmt', 'yuv420p', '-fps_mode', 'passthrough', '-enc_time_base', '1:1000000', '-f', 'rawvideo', '-flush_packets', '1', 'pipe:1'];
}

export class X11Source implements FrameSource {
  readonly kind = 'x11';
  readonly feed: FrameFeed;
  readonly app: Application;
  readonly display: string;
  readonly #config: Config;
  readonly #log: Logger;
  readonly #events: SourceEvents;
  readonly #x: XConnection;
  readonly #input: X11Input;
  readonly #server: VirtualDisplay | undefined;
  #capture: ChildProcess | undefined;
  #closed = false;
  /** Newest input injected, and the newest one injected before the last captured frame arrived. */
  #lastInjected = 0;
  #injectedBeforeLastFrame = 0;

  private constructor(options: {
    config: Config; log: Logger; events: SourceEvents; encoder: VideoEncoder;
    x: XConnection; input: X11Input; server: VirtualDisplay | undefined; app: Application; display: string;
  }) {
    this.#config = options.config;
    this.#log = options.log;
    this.#events = options.events;
    this.#x = options.x;
    this.#input = options.input;
    this.#server = options.server;
    this.app = options.app;
    this.display = options.display;
    this.feed = new FrameFeed(options.encoder, options.config.width, options.config.height, options.config.barcode, true);
    this.#x.onLost((why) => { if (!this.#closed) this.#events.onFailure(why); });
    options.server?.child.once('exit', (code, signal) => { if (!this.#closed) this.#events.onFailure(`Xvfb exited (${code ?? signal})`); });
  }

  /** Brings up the display and the application; rejects with one readable line when either fails. */
  static async open(config: Config, encoder: VideoEncoder, log: Logger, appEnv: Record<string, string>, events: SourceEvents): Promise<X11Source> {
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
      await x.waitForWindow(config.appStartTimeoutMs, () => (started.exit ? `the application ${started.describeExit(' before showing a window')}` : undefined));
      log.info({ appPid: app.pid, ms: Math.round(performance.now() - startedAt) }, 'application window mapped');
      return new X11Source({ config, log, events, encoder, x, input, server, app, display });
    } catch (error) {
      x?.close();
      await app?.stop();
      await server?.stop();
      throw error;
    }
  }

  prime(): void {
    this.feed.prime();
    if (!this.#capture) this.#startCapture();
  }

  start(): void {
    this.feed.start();
    if (!this.#capture) this.#startCapture();
  }

  stop(): void {
    this.feed.stop();
    this.#input.releaseAll();
    const capture = this.#capture;
    this.#capture = undefined;
    if (capture) void stopChild(capture, 500);
  }

  input(event: InputMessage): boolean {
    if (!this.#input.apply(event)) return false;
    this.#lastInjected = event.seq;
    return true;
  }

  #startCapture(): void {
    const { width, height, fps, ffmpegPath } = this.#config;
    const capture = spawnChild(ffmpegPath, captureArgs(this.display, width, height, fps), { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#capture = capture;
    const stderr = new LineTail(capture.stderr);
    const reader = new RawFrameReader(this.feed);
    // A frame reflects the input injected before the previous frame arrived: that input was certainly
    // in the server before this frame was grabbed (grabs are a frame interval apart and the conversion
    // takes less). Conservative by up to one frame; the app's own reaction time comes on top.
    reader.onFrame = () => {
      this.feed.inputSeq = this.#injectedBeforeLastFrame;
      this.#injectedBeforeLastFrame = this.#lastInjected;
      if (reader.framesRead === 1) this.#log.info('first frame captured');
    };
    capture.stdout?.on('data', (chunk: Buffer) => reader.push(chunk));
    void exited(capture).then(({ code, signal }) => {
      if (capture !== this.#capture || this.#closed) return;
      this.#capture = undefined;
      this.#events.onFailure(`screen capture exited (${code ?? signal}): ${stderr.last() || 'no message'}`);
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.stop();
    this.#x.close();
    await this.app.stop();
    await this.#server?.stop();
  }
}
