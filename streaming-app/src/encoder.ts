// Video encoder: an ffmpeg subprocess fed raw I420 frames on stdin, returning framed access units on
// stdout. The choice of encoder is probed once at start with a one-frame trial encode.
//
// Keyframes on demand: an ffmpeg process cannot be told to emit an IDR frame mid-stream, but the first
// frame any new process encodes is one. So a spare process is kept warm (spawned, libraries loaded,
// blocked on stdin); "connect" and "PLI" both switch the frame feed to the spare, which answers with a
// keyframe within one encode time, and a new spare is spawned in the background.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { FlvReader } from './flv-reader.ts';
import { IvfReader } from './ivf-reader.ts';
import type { Logger } from './logger.ts';

export type EncoderName = 'h264_nvenc' | 'libx264' | 'libvpx';
export type VideoCodec = 'H264' | 'VP8';

export type EncoderSettings = {
  encoder: EncoderName;
  width: number;
  height: number;
  fps: number;
  bitrateKbps: number;
  keyframeIntervalFrames: number;
  ffmpegPath: string;
  /** ffmpeg before 5.1 (the npm-shipped 2018 build among them) knows -vsync, not -fps_mode. */
  legacyFrameSync?: boolean;
};

export type EncodedFrame = {
  data: Buffer;
  keyframe: boolean;
  frameNumber: number;
  /** performance.now() when the frame was rendered; drives the RTP timestamp. */
  captureMs: number;
  /** From the frame entering ffmpeg's stdin to its last encoded byte leaving stdout. */
  encodeMs: number;
  /** The quantiser the encoder chose for the frame, where it reports one (the in-process encoder). */
  qp?: number;
};

/**
 * What the frame sources and the session need from an encoder: the CLI one here (a bitrate fixed per
 * process, keyframes by switching to a warm spare) or the in-process one (libav-encoder.ts).
 */
export type FrameEncoder = {
  readonly settings: EncoderSettings;
  readonly codec: VideoCodec;
  readonly stats: EncoderStats;
  readonly running: boolean;
  readonly awaitingFrame: boolean;
  readonly pids: number[];
  /** The rate the encoder aims at now, kbit/s. */
  readonly bitrateKbps: number;
  onAwaitingFrame: (() => void) | undefined;
  prepare(): void;
  prime(frame: Buffer, frameNumber: number, captureMs: number, done: () => void): boolean;
  start(): void;
  submit(frame: Buffer, frameNumber: number, captureMs: number, done: () => void): boolean;
  requestKeyframe(reason: string): void;
  /** Follow the bandwidth estimate; an encoder that cannot change its rate keeps its own. */
  setBitrate(kbps: number): void;
  stop(): void;
};

export function codecOf(encoder: EncoderName): VideoCodec {
  return encoder === 'libvpx' ? 'VP8' : 'H264';
}

/** The same argument list serves the trial encode and the real one, so the probe tests what will run. */
export function ffmpegArgs(s: EncoderSettings, frames?: number): string[] {
  const kbps = s.bitrateKbps;
  // A VBV of about four frames keeps keyframe bursts, and so queueing delay on the link, short.
  const bufferKbits = Math.max(Math.round((kbps / s.fps) * 4), 50);
  const input = [
    '-hide_banner', '-loglevel', 'error', '-nostdin',
    '-f', 'rawvideo', '-pix_fmt', 'yuv420p', '-s', `${s.width}x${s.height}`, '-framerate', String(s.fps),
    '-i', 'pipe:0',
  ];
  const rate = ['-b:v', `${kbps}k`, '-maxrate', `${kbps}k`, '-bufsize', `${bufferKbits}k`, '-g', String(s.keyframeIntervalFrames)];
  let codec: string[];
  switch (s.encoder) {
    case 'libx264':
      codec = ['-c:v', 'libx264', '-preset', 'ultrafast', '-tune', 'zerolatency', '-profile:v', 'baseline', '-bf', '0', ...rate];
      break;
    case 'h264_nvenc':
      codec = ['-c:v', 'h264_nvenc', '-preset', 'p1', '-tune', 'ull', '-zerolatency', '1', '-delay', '0', '-rc', 'cbr',
        '-profile:v', 'baseline', '-bf', '0', ...rate];
      break;
    case 'libvpx':
      codec = ['-c:v', 'libvpx', '-deadline', 'realtime', '-cpu-used', '8', '-lag-in-frames', '0', '-auto-alt-ref', '0',
        '-error-resilient', '1', ...rate];
      break;
  }
  const limit = frames === undefined ? [] : ['-frames:v', String(frames)];
  const output = codecOf(s.encoder) === 'H264' ? ['-f', 'flv'] : ['-f', 'ivf'];
  // passthrough: one output frame per input frame, never duplicated or dropped by ffmpeg's frame-rate logic.
  const frameSync = s.legacyFrameSync ? ['-vsync', 'passthrough'] : ['-fps_mode', 'passthrough'];
  return [...input, ...codec, ...limit, ...frameSync, '-flush_packets', '1', ...output, 'pipe:1'];
}

/** One-frame trial encode: resolves with the time it took, or with the reason it failed. */
export function probeEncoder(settings: EncoderSettings, timeoutMs = 10_000): Promise<{ ok: true; ms: number } | { ok: false; reason: string }> {
  return new Promise((resolve) => {
    const started = performance.now();
    let child: ChildProcess;
    try {
      child = spawn(settings.ffmpegPath, ffmpegArgs(settings, 1), { stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (error) {
      resolve({ ok: false, reason: (error as Error).message });
      return;
    }
    let stderr = '';
    let bytes = 0;
    const timer = setTimeout(() => { child.kill('SIGKILL'); }, timeoutMs);
    child.stderr?.on('data', (d: Buffer) => { stderr = (stderr + d.toString()).slice(-2000); });
    child.stdout?.on('data', (d: Buffer) => { bytes += d.length; });
    child.stdin?.on('error', () => { /* reported through the exit status */ });
    child.on('error', (error) => { clearTimeout(timer); resolve({ ok: false, reason: error.message }); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0 && bytes > 0) resolve({ ok: true, ms: performance.now() - started });
      else resolve({ ok: false, reason: (stderr.trim().split('\n').pop() || `exit ${code ?? signal}`).slice(0, 300) });
    });
    // A mid-grey frame: any encoder that can open its device encodes it.
    child.stdin?.end(Buffer.alloc((settings.width * settings.height * 3) / 2, 128));
  });
}

/** Device nodes of NVIDIA's driver (Linux, and WSL's GPU): without one, NVENC cannot answer. */
export const NVIDIA_DEVICES = ['/dev/nvidiactl', '/dev/dxg'];

/**
 * Picks the encoder: the configured one, or the first of h264_nvenc, libx264, libvpx that encodes a
 * frame. Without an NVIDIA device h264_nvenc is not tried: its failing trial costs a container start
 * about 0.1 s.
 */
export async function chooseEncoder(
  wanted: 'auto' | EncoderName,
  base: Omit<EncoderSettings, 'encoder'>,
  log: Logger,
  gpuDevices: string[] = NVIDIA_DEVICES,
): Promise<EncoderSettings> {
  const candidates: EncoderName[] = wanted === 'auto' ? ['h264_nvenc', 'libx264', 'libvpx'] : [wanted];
  if (wanted === 'auto' && !gpuDevices.some((device) => existsSync(device))) {
    candidates.shift();
    log.info({ encoder: 'h264_nvenc', reason: `no NVIDIA device (${gpuDevices.join(', ')})` }, 'video encoder unavailable');
  }
  const failures: string[] = [];
  for (const encoder of candidates) {
    let settings: EncoderSettings = { ...base, encoder };
    let result = await probeEncoder(settings);
    if (!result.ok && /Option not found|fps_mode/.test(result.reason)) result = await probeEncoder(settings = { ...settings, legacyFrameSync: true });
    if (result.ok) {
      log.info({ encoder, codec: codecOf(encoder), width: base.width, height: base.height, fps: base.fps,
        bitrateKbps: base.bitrateKbps, keyframeIntervalFrames: base.keyframeIntervalFrames, probeMs: Math.round(result.ms) },
      'video encoder selected');
      return settings;
    }
    // Expected on machines without NVENC (including H100/H200, which have no video encoder).
    log.info({ encoder, reason: result.reason }, 'video encoder unavailable');
    failures.push(`${encoder}: ${result.reason}`);
  }
  throw new Error(`no usable video encoder (${failures.join('; ')})`);
}

type PendingFrame = { frameNumber: number; captureMs: number; submittedMs: number };

/** One ffmpeg process: frames in, encoded frames out, in order. */
class EncoderProcess {
  readonly child: ChildProcess;
  readonly #pending: PendingFrame[] = [];
  #stderr = '';
  #retired = false;
  #onFrame: (frame: EncodedFrame) => void;

  constructor(settings: EncoderSettings, onFrame: (frame: EncodedFrame) => void, onUnexpectedExit: (reason: string) => void) {
    this.#onFrame = onFrame;
    this.child = spawn(settings.ffmpegPath, ffmpegArgs(settings), { stdio: ['pipe', 'pipe', 'pipe'] });
    const emit = (data: Buffer, keyframe: boolean): void => {
      const meta = this.#pending.shift();
      if (!meta || this.#retired) return;
      this.#onFrame({ data, keyframe, frameNumber: meta.frameNumber, captureMs: meta.captureMs, encodeMs: performance.now() - meta.submittedMs });
    };
    const reader = codecOf(settings.encoder) === 'H264'
      ? new FlvReader((unit) => emit(unit.data, unit.keyframe))
      : new IvfReader((frame) => emit(frame.data, frame.keyframe));
    this.child.stdout?.on('data', (chunk: Buffer) => reader.push(chunk));
    this.child.stderr?.on('data', (d: Buffer) => { this.#stderr = (this.#stderr + d.toString()).slice(-2000); });
    this.child.stdin?.on('error', () => { /* EPIPE after exit; the exit handler reports it */ });
    this.child.on('error', (error) => { if (!this.#retired) onUnexpectedExit(error.message); });
    this.child.on('exit', (code, signal) => {
      if (this.#retired) return;
      onUnexpectedExit(`ffmpeg exited (${code ?? signal}): ${this.#stderr.trim().split('\n').pop() ?? ''}`.slice(0, 400));
    });
  }

  /** Frames written but not yet returned by the encoder. */
  get backlog(): number {
    return this.#pending.length;
  }

  write(frame: Buffer, frameNumber: number, captureMs: number, done: () => void): void {
    this.#pending.push({ frameNumber, captureMs, submittedMs: performance.now() });
    this.child.stdin?.write(frame, () => done());
  }

  /** Stops for good; frames still inside are dropped (the next process starts with a keyframe anyway). */
  retire(): void {
    if (this.#retired) return;
    this.#retired = true;
    this.child.stdin?.end();
    // ffmpeg exits on end of input; make sure a wedged encoder does not outlive the session.
    const killer = setTimeout(() => this.child.kill('SIGKILL'), 2000);
    killer.unref();
    this.child.once('exit', () => clearTimeout(killer));
  }
}

export type EncoderStats = {
  encoder: EncoderName;
  framesIn: number;
  framesOut: number;
  /** Frames the source could not hand to the encoder because it was still busy (kept latency bounded). */
  framesSkipped: number;
  keyframes: number;
  bytesOut: number;
  restarts: number;
  /** Size or frame-rate changes made for a slow link (STREAMING_DEGRADATION; the in-process encoder only). */
  degradations?: number;
  /** Encode time of recent frames, ms, newest last. */
  recentEncodeMs: number[];
};

const KEYFRAME_COOLDOWN_MS = 250;
/** More frames than this waiting inside ffmpeg means it cannot keep up: skip at the source instead of queueing. */
const MAX_BACKLOG = 2;
const RECENT_SAMPLES = 120;
const SPARE_DELAY_MS = 500;

export class VideoEncoder implements FrameEncoder {
  readonly settings: EncoderSettings;
  readonly codec: VideoCodec;
  readonly #log: Logger;
  readonly #onFrame: (frame: EncodedFrame) => void;
  readonly #onFatal: (reason: string) => void;
  #active: EncoderProcess | undefined;
  #spare: EncoderProcess | undefined;
  #primed: { process: EncoderProcess; keyframe: EncodedFrame | undefined } | undefined;
  #spareTimer: NodeJS.Timeout | undefined;
  #lastSwitchMs = -Infinity;
  /** A fresh process (start, keyframe switch) that has not had a frame yet: its keyframe waits for one. */
  #awaitingFrame = false;
  #keyframeTimer: NodeJS.Timeout | undefined;
  #stopped = false;
  readonly stats: EncoderStats;
  /** Called when a fresh process waits for a frame; a source that sends frames only on change sends one. */
  onAwaitingFrame: (() => void) | undefined;

  constructor(settings: EncoderSettings, log: Logger, onFrame: (frame: EncodedFrame) => void, onFatal: (reason: string) => void) {
    this.settings = settings;
    this.codec = codecOf(settings.encoder);
    this.#log = log;
    this.#onFrame = onFrame;
    this.#onFatal = onFatal;
    this.stats = { encoder: settings.encoder, framesIn: 0, framesOut: 0, framesSkipped: 0, keyframes: 0, bytesOut: 0, restarts: 0, recentEncodeMs: [] };
  }

  get bitrateKbps(): number {
    return this.settings.bitrateKbps;
  }

  /** The ffmpeg CLI cannot change its rate without a new process and a keyframe: it keeps the configured one. */
  setBitrate(kbps: number): void {
    void kbps;
  }

  /** Spawns the warm spare so that the first session frame does not pay for process start-up. */
  prepare(): void {
    if (!this.#spare && !this.#stopped) this.#spare = this.#spawn();
  }

  #spawn(): EncoderProcess {
    const proc: EncoderProcess = new EncoderProcess(this.settings, (frame) => this.#handleFrame(proc, frame), (reason) => {
      if (!this.#stopped) this.#onFatal(reason);
    });
    return proc;
  }

  #handleFrame(source: EncoderProcess, frame: EncodedFrame): void {
    if (this.#primed?.process === source) {
      this.#primed.keyframe ??= frame;
      return;
    }
    if (source === this.#active) this.#deliver(frame);
  }

  #deliver(frame: EncodedFrame): void {
    const s = this.stats;
    s.framesOut++;
    s.bytesOut += frame.data.length;
    if (frame.keyframe) s.keyframes++;
    if (s.recentEncodeMs.length === RECENT_SAMPLES) s.recentEncodeMs.shift();
    s.recentEncodeMs.push(frame.encodeMs);
    this.#onFrame(frame);
  }

  /** True when a keyframe is waiting for the next frame; a source that skips unchanged frames must send one. */
  get awaitingFrame(): boolean {
    return this.#awaitingFrame;
  }

  /** True while frames are being encoded (between start() and stop()). */
  get running(): boolean {
    return this.#active !== undefined;
  }

  /** Starts encoding: the next submitted frame goes to a fresh process and so comes out as a keyframe. */
  start(): void {
    if (this.#stopped) return;
    const primed = this.#primed;
    if (!primed) {
      this.#switch('start');
      return;
    }
    this.#primed = undefined;
    this.#active = primed.process;
    this.#lastSwitchMs = performance.now();
    // Its keyframe is stamped as the frame just before the first live one, so RTP timing stays smooth.
    if (primed.keyframe) this.#deliver({ ...primed.keyframe, captureMs: performance.now() - 1000 / this.settings.fps });
    // The next spare is spawned a little later, so its start-up does not compete with the first frames.
    this.#spareTimer = setTimeout(() => {
      this.#spareTimer = undefined;
      if (!this.#stopped && !this.#spare) this.#spare = this.#spawn();
    }, SPARE_DELAY_MS);
  }

  /**
   * Session start: the warm spare encodes one frame right away, while ICE and DTLS are still busy, so that
   * a keyframe is ready the moment the peer connects instead of one encoder start-up later.
   * Same contract as submit().
   */
  prime(frame: Buffer, frameNumber: number, captureMs: number, done: () => void): boolean {
    if (this.#stopped || this.#active || this.#primed) return false;
    const proc = this.#spare ?? this.#spawn();
    this.#spare = undefined;
    this.#primed = { process: proc, keyframe: undefined };
    this.stats.framesIn++;
    proc.write(frame, frameNumber, captureMs, done);
    return true;
  }

  /**
   * Hands a rendered frame to the encoder. Returns false when the frame was skipped; `done` is then not
   * called and the caller keeps the buffer. Otherwise `done` runs once ffmpeg has taken the bytes.
   */
  submit(frame: Buffer, frameNumber: number, captureMs: number, done: () => void): boolean {
    const active = this.#active;
    if (!active || this.#stopped) return false;
    if (active.backlog > MAX_BACKLOG) {
      this.stats.framesSkipped++;
      return false;
    }
    this.stats.framesIn++;
    this.#awaitingFrame = false;
    active.write(frame, frameNumber, captureMs, done);
    return true;
  }

  /** A receiver lost its reference picture (PLI) or a new one joined: get a keyframe out soon. */
  requestKeyframe(reason: string): void {
    if (!this.#active || this.#stopped || this.#keyframeTimer) return;
    const wait = this.#lastSwitchMs + KEYFRAME_COOLDOWN_MS - performance.now();
    if (wait <= 0) {
      this.#switch(reason);
      return;
    }
    // Coalesce a burst of PLIs (one per lost frame) into a single keyframe.
    this.#keyframeTimer = setTimeout(() => {
      this.#keyframeTimer = undefined;
      if (this.#active && !this.#stopped) this.#switch(reason);
    }, wait);
  }

  #switch(reason: string): void {
    const warm = this.#spare !== undefined;
    const next = this.#spare ?? this.#spawn();
    this.#spare = undefined;
    const previous = this.#active;
    this.#active = next;
    this.#awaitingFrame = true;
    this.#lastSwitchMs = performance.now();
    this.onAwaitingFrame?.();
    previous?.retire();
    if (previous) this.stats.restarts++;
    this.#log.debug({ reason, warm }, 'encoder switched for keyframe');
    // The new spare starts while the active one warms up; both are mostly idle until frames arrive.
    this.#spare = this.#spawn();
  }

  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#keyframeTimer) clearTimeout(this.#keyframeTimer);
    if (this.#spareTimer) clearTimeout(this.#spareTimer);
    this.#active?.retire();
    this.#spare?.retire();
    this.#primed?.process.retire();
    this.#active = undefined;
    this.#spare = undefined;
    this.#primed = undefined;
  }

  /** Process ids of the live ffmpeg children, for diagnostics and tests. */
  get pids(): number[] {
    return [this.#active?.child.pid, this.#spare?.child.pid, this.#primed?.process.child.pid].filter((pid): pid is number => pid !== undefined);
  }
}
