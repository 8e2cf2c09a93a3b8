// The application's sound. At start-up the container runs its own PulseAudio server (no daemon, no
// system files: a private runtime directory, anonymous access on a private socket) with one null sink;
// the application plays into it (PULSE_SERVER and PULSE_SINK in its environment). Each session captures
// the sink's monitor with ffmpeg and encodes Opus, one packet per Ogg page, so every packet leaves the
// moment it is encoded: on a clean link 48 kHz stereo, 5 ms frames, low-delay (CELT-only) mode; on a
// lossy one 20 ms frames in hybrid mode with in-band FEC (each packet carries a coarse copy of the one
// before, which a browser that lost it decodes instead of concealing), as Chrome asks (useinbandfec=1).
// CELT cannot carry FEC, and 5 ms frames are too short for SILK.
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
export const AUDIO_CLOCK_HZ = 48_000;

/** low-delay: the clean-link default; resilient: in-band FEC for a lossy link, at 15 ms more delay. */
export type AudioMode = 'low-delay' | 'resilient';

/** Encoder settings per mode; a 20 ms hybrid frame at 64 kbit/s stereo is where libopus adds FEC. */
export const AUDIO_MODES: Record<AudioMode, { frameMs: number; args: string[] }> = {
  'low-delay': { frameMs: 5, args: ['-b:a', '128k', '-application', 'lowdelay', '-frame_duration', '5'] },
  resilient: { frameMs: 20, args: ['-b:a', '64k', '-application', 'audio', '-frame_duration', '20', '-fec', '1', '-packet_loss', '10'] },
};

export type EncodedAudio = { data: Buffer; captureMs: number; durationMs: number };

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

  readonly mode: AudioMode;

  constructor(server: PulseServer, ffmpegPath: string, log: Logger, onPacket: (audio: EncodedAudio) => void, onFailure: (reason: string) => void,
    mode: AudioMode = 'low-delay') {
    this.mode = mode;
    const { frameMs, args } = AUDIO_MODES[mode];
    const fragmentBytes = (AUDIO_CLOCK_HZ / 1000) * frameMs * 2 * 2; // s16 stereo
    // How long before its arrival a packet's first sample entered the sink: the frame it fills, half a
    // PulseAudio fragment (one frame long) on average before the monitor hands it on, and Opus's 2.5 ms look-ahead.
    const captureDelayMs = frameMs * 1.5 + 2.5;
    this.#child = spawnChild(ffmpegPath, [
      '-hide_banner', '-loglevel', 'error', '-nostdin',
      '-f', 'pulse', '-server', server.socket, '-fragment_size', String(fragmentBytes), '-sample_rate', String(AUDIO_CLOCK_HZ), '-channels', '2',
      '-i', `${SINK}.monitor`,
      '-c:a', 'libopus', ...args,
      '-f', 'ogg', '-page_duration', String(frameMs * 1000), '-flush_packets', '1', 'pipe:1',
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    const stderr = new LineTail(this.#child.stderr);
    const reader = new OggOpusReader((data) => {
      if (this.packets++ === 0) log.info({ mode }, 'first audio packet encoded');
      onPacket({ data, captureMs: performance.now() - captureDelayMs, durationMs: frameMs });
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
