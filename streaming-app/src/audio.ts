// The application's sound. At start-up the container runs its own PulseAudio server (no daemon, no
// system files: a private runtime directory, anonymous access on a private socket) with one null sink;
// the application plays into it (PULSE_SERVER and PULSE_SINK in its environment). Each session captures
// the sink's monitor with ffmpeg and encodes Opus: 48 kHz stereo, 5 ms frames, low-delay mode, one
// packet per Ogg page, so every packet leaves the moment it is encoded.
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exited, spawnChild, stopChild } from './children.ts';
import { LineTail } from './line-tail.ts';
import type { Logger } from './logger.ts';
import { OggOpusReader } from './ogg-reader.ts';

const SINK = 'svc';
const START_TIMEOUT_MS = 10_000;
export const AUDIO_FRAME_MS = 5;
export const AUDIO_CLOCK_HZ = 48_000;
/**
 * How long before its arrival a packet's first sample entered the sink: the frame it fills, half a
 * PulseAudio fragment (one frame long) on average before the monitor hands it on, and Opus's 2.5 ms
 * low-delay look-ahead.
 */
const CAPTURE_DELAY_MS = AUDIO_FRAME_MS * 1.5 + 2.5;

export type EncodedAudio = { data: Buffer; captureMs: number };

export class PulseServer {
  readonly #child: ChildProcess;
  readonly #dir: string;
  readonly socket: string;

  private constructor(child: ChildProcess, dir: string) {
    this.#child = child;
    this.#dir = dir;
    this.socket = join(dir, 'native');
  }

  /** What the application needs in its environment to play into the sink. */
  get appEnv(): Record<string, string> {
    return { PULSE_SERVER: `unix:${this.socket}`, PULSE_SINK: SINK };
  }

  get exited(): Promise<unknown> {
    return exited(this.#child);
  }

  static async start(pulseaudioPath: string): Promise<PulseServer> {
    const dir = await mkdtemp(join(tmpdir(), 'svc-pulse-'));
    const socket = join(dir, 'native');
    const child = spawnChild(pulseaudioPath, [
      '--daemonize=no', '--exit-idle-time=-1', '--use-pid-file=no', '--disallow-exit', '-n', '--log-target=stderr', '--log-level=error',
      '-L', `module-null-sink sink_name=${SINK} rate=${AUDIO_CLOCK_HZ} channels=2`,
      '-L', `module-native-protocol-unix socket=${socket} auth-anonymous=1`,
    ], {
      // A private home and runtime directory: nothing of the user's PulseAudio is read or touched.
      env: { ...process.env, HOME: dir, XDG_RUNTIME_DIR: dir, XDG_CONFIG_HOME: dir, PULSE_RUNTIME_PATH: join(dir, 'runtime') },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const stderr = new LineTail(child.stderr);
    const server = new PulseServer(child, dir);
    const deadline = performance.now() + START_TIMEOUT_MS;
    while (!existsSync(socket)) {
      if (child.exitCode !== null || child.signalCode !== null || performance.now() > deadline) {
        await server.stop();
        throw new Error(`PulseAudio did not start: ${stderr.last() || 'no socket within 10 s'}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    return server;
  }

  async stop(): Promise<void> {
    await stopChild(this.#child);
    await rm(this.#dir, { recursive: true, force: true });
  }
}

/** ffmpeg: the sink's monitor → Opus packets; started per session, stopped at its end. */
export class AudioCapture {
  readonly #child: ChildProcess;
  #stopped = false;
  packets = 0;

  constructor(server: PulseServer, ffmpegPath: string, log: Logger, onPacket: (audio: EncodedAudio) => void, onFailure: (reason: string) => void) {
    const fragmentBytes = (AUDIO_CLOCK_HZ / 1000) * AUDIO_FRAME_MS * 2 * 2; // s16 stereo
    this.#child = spawnChild(ffmpegPath, [
      '-hide_banner', '-loglevel', 'error', '-nostdin',
      '-f', 'pulse', '-server', server.socket, '-fragment_size', String(fragmentBytes), '-sample_rate', String(AUDIO_CLOCK_HZ), '-channels', '2',
      '-i', `${SINK}.monitor`,
      '-c:a', 'libopus', '-b:a', '128k', '-application', 'lowdelay', '-frame_duration', String(AUDIO_FRAME_MS),
      '-f', 'ogg', '-page_duration', String(AUDIO_FRAME_MS * 1000), '-flush_packets', '1', 'pipe:1',
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    const stderr = new LineTail(this.#child.stderr);
    const reader = new OggOpusReader((data) => {
      if (this.packets++ === 0) log.info('first audio packet encoded');
      onPacket({ data, captureMs: performance.now() - CAPTURE_DELAY_MS });
    });
    this.#child.stdout?.on('data', (chunk: Buffer) => reader.push(chunk));
    void exited(this.#child).then(({ code, signal }) => {
      if (!this.#stopped) onFailure(`audio capture exited (${code ?? signal}): ${stderr.last() || 'no message'}`);
    });
  }

  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    void stopChild(this.#child, 500);
  }
}
