// Raw frames from an off-screen renderer as the frame source. The container listens on a unix socket
// (STREAMING_FRAME_PIPE), starts the application with that path in its environment, and reads I420
// frames of exactly STREAMING_VIDEO_SIZE back to back, at whatever pace the app writes them; each one
// goes to the encoder as it completes. Input goes the other way on the same socket, one JSON line per
// event (the DataChannel's InputMessage). The container is ready once the first frame has arrived.
import { rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InputMessage } from '../client/protocol.ts';
import { Application } from './app.ts';
import type { Config } from './config.ts';
import type { FrameEncoder } from './encoder.ts';
import { FrameFeed, type FrameSource, type SourceEvents } from './frame-source.ts';
import type { Logger } from './logger.ts';
import { RawFrameReader } from './raw-frames.ts';

/** Input not yet read by the app beyond this is dropped rather than buffered without bound. */
const MAX_UNREAD_INPUT_BYTES = 64 * 1024;

export class PipeSource implements FrameSource {
  readonly kind = 'pipe';
  readonly feed: FrameFeed;
  readonly app: Application;
  readonly #server: Server;
  readonly #path: string;
  readonly #ownDir: string | undefined;
  readonly #events: SourceEvents;
  #socket: Socket | undefined;
  #closed = false;
  #lastSent = 0;
  #sentBeforeLastFrame = 0;

  private constructor(options: { feed: FrameFeed; app: Application; server: Server; path: string; ownDir: string | undefined; events: SourceEvents }) {
    this.feed = options.feed;
    this.app = options.app;
    this.#server = options.server;
    this.#path = options.path;
    this.#ownDir = options.ownDir;
    this.#events = options.events;
  }

  /** Listens, starts the application and waits for its first frame; rejects with one readable line. */
  static async open(config: Config, encoder: FrameEncoder, log: Logger, appEnv: Record<string, string>, events: SourceEvents): Promise<PipeSource> {
    const ownDir = config.framePipe ? undefined : await mkdtemp(join(tmpdir(), 'svc-frames-'));
    const path = config.framePipe ?? join(ownDir ?? '', 'frames.sock');
    rmSync(path, { force: true }); // a socket left by an earlier run
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error) => reject(new Error(`cannot listen on STREAMING_FRAME_PIPE ${path}: ${error.message}`)));
      server.listen(path, resolve);
    });
    const feed = new FrameFeed(encoder, config.width, config.height, config.barcode, true);
    const app = new Application(config.appCommand ?? '', {
      ...appEnv, STREAMING_FRAME_PIPE: path, STREAMING_FRAME_FORMAT: 'yuv420p',
      STREAMING_VIDEO_WIDTH: String(config.width), STREAMING_VIDEO_HEIGHT: String(config.height), STREAMING_VIDEO_FPS: String(config.fps),
    }, log);
    const source = new PipeSource({ feed, app, server, path, ownDir, events });
    try {
      await source.#firstFrame(config.appStartTimeoutMs, log);
      return source;
    } catch (error) {
      await source.close();
      throw error;
    }
  }

  #firstFrame(timeoutMs: number, log: Logger): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the application sent no frame on ${this.#path} within ${Math.round(timeoutMs / 1000)} s`)), timeoutMs);
      void this.app.exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`the application ${this.app.describeExit(' before sending a frame')}`));
      });
      this.#server.on('connection', (socket) => {
        if (this.#socket) {
          socket.destroy(); // one renderer per container
          return;
        }
        this.#socket = socket;
        const reader = new RawFrameReader(this.feed);
        reader.onFrame = () => {
          this.feed.inputSeq = this.#sentBeforeLastFrame;
          this.#sentBeforeLastFrame = this.#lastSent;
          if (reader.framesRead === 1) {
            clearTimeout(timer);
            log.info({ path: this.#path, frameBytes: this.feed.frameBytes }, 'first frame received from the application');
            resolve();
          }
        };
        socket.on('data', (chunk: Buffer) => reader.push(chunk));
        socket.on('error', () => { /* reported by close */ });
        socket.on('close', () => {
          if (!this.#closed && this.app.exit === undefined) this.#events.onFailure('the application closed its frame socket');
        });
      });
    });
  }

  prime(): void {
    this.feed.prime();
  }

  start(): void {
    this.feed.start();
  }

  stop(): void {
    this.feed.stop();
  }

  input(event: InputMessage): boolean {
    const socket = this.#socket;
    if (!socket || socket.writableLength > MAX_UNREAD_INPUT_BYTES) return false;
    socket.write(`${JSON.stringify(event)}\n`);
    this.#lastSent = event.seq;
    return true;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.stop();
    this.#socket?.destroy();
    this.#server.close();
    await this.app.stop();
    if (this.#ownDir) await rm(this.#ownDir, { recursive: true, force: true });
    else rmSync(this.#path, { force: true });
  }
}
