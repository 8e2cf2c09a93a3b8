// The in-process video encoder: FFmpeg's libavcodec through node-av (its prebuilt FFmpeg ships inside the
// npm package), driven frame by frame on libuv's thread pool. Unlike the ffmpeg CLI it can change its
// bitrate between two frames (libx264 and NVENC reconfigure on a new AVCodecContext bit_rate, libvpx
// takes it too) and emit a keyframe on request (a frame marked I, with forced-idr), so following the
// bandwidth estimate costs neither a process switch nor a keyframe. The CLI encoder (encoder.ts) remains
// for a machine where node-av cannot load.
import { existsSync } from 'node:fs';
import type { EncodedFrame, EncoderName, EncoderSettings, EncoderStats, FrameEncoder, VideoCodec } from './encoder.ts';
import { codecOf, NVIDIA_DEVICES } from './encoder.ts';
import { DegradationPolicy, type DegradationPreference, type OperatingPoint } from './degradation.ts';
import type { Logger } from './logger.ts';

type NodeAv = typeof import('node-av');
type Constants = typeof import('node-av/constants');
type Context = InstanceType<NodeAv['CodecContext']>;
type Frame = InstanceType<NodeAv['Frame']>;
/** A frame of a smaller size and libswscale set up to fill it from the full picture. */
type Scaled = { frame: Frame; scaler: InstanceType<NodeAv['SoftwareScaleContext']> };

/** Loads node-av once; undefined (with the reason) where its native part cannot load on this machine. */
let loaded: Promise<{ av: NodeAv; constants: Constants } | { error: string }> | undefined;
export function loadNodeAv(): Promise<{ av: NodeAv; constants: Constants } | { error: string }> {
  loaded ??= Promise.all([import('node-av'), import('node-av/constants')]).then(([av, constants]) => {
    // FFmpeg's own log goes to stderr, which is reserved for the one start-up failure line; its errors
    // reach us as return codes and are logged from there.
    av.Log.setLevel(constants.AV_LOG_QUIET);
    return { av, constants };
  }, (error: unknown) => ({ error: (error as Error).message.split('\n')[0].slice(0, 200) }));
  return loaded;
}

/** Rates below this the encoder is never asked for: the picture would be mush and the decoder would stall on it anyway. */
const MIN_KBPS = 150;
/** A change of less than this fraction is not worth a reconfiguration. */
const MIN_CHANGE = 0.05;
/** PLIs arrive one per lost frame: answer at most one per this interval with a keyframe. */
export const KEYFRAME_MIN_INTERVAL_MS = 500;
const MAX_IN_FLIGHT = 2;
const RECENT_SAMPLES = 120;

/** Private options of each encoder: low latency, no B-frames, headers in front of every keyframe. */
function encoderOptions(settings: EncoderSettings): Record<string, string> {
  switch (settings.encoder) {
    case 'libx264':
      return { preset: 'ultrafast', tune: 'zerolatency', profile: 'baseline', 'forced-idr': '1', 'x264-params': 'repeat-headers=1:annexb=1' };
    case 'h264_nvenc':
      return { preset: 'p1', tune: 'ull', zerolatency: '1', delay: '0', rc: 'cbr', profile: 'baseline', 'forced-idr': '1' };
    case 'libvpx':
      return { deadline: 'realtime', 'cpu-used': '8', 'lag-in-frames': '0', 'auto-alt-ref': '0', 'error-resilient': '1' };
  }
}

/** A VBV of about four frames at the rate: keyframes stay short on the link even after a rate change. */
function applyRate(ctx: Context, kbps: number, fps: number): void {
  const bps = BigInt(Math.round(kbps * 1000));
  ctx.bitRate = bps;
  ctx.rcMaxRate = bps;
  ctx.rcBufferSize = Math.max(Math.round(((kbps * 1000) / fps) * 4), 50_000);
}

/** Annex B (start codes) to 4-byte length prefixes, the framing rtp.ts's H.264 packetizer reads. */
/** FFmpeg's quality unit: lambda per QP. */
const QP2LAMBDA = 118;

/**
 * A packet's QP from its quality-stats side data (FFmpeg's AV_PKT_DATA_QUALITY_STATS: the quality as a
 * little-endian 32-bit lambda first), or undefined when the encoder gave none.
 */
function qpOf(stats: Buffer | null): number | undefined {
  return stats && stats.length >= 4 ? stats.readUInt32LE(0) / QP2LAMBDA : undefined;
}

export function annexBToLengthPrefixed(data: Buffer): Buffer {
  const starts: { at: number; codeLength: number }[] = [];
  for (let i = 0; i + 2 < data.length; i++) {
    if (data[i] !== 0 || data[i + 1] !== 0) continue;
    if (data[i + 2] === 1) {
      starts.push({ at: i, codeLength: 3 });
      i += 2;
    } else if (data[i + 2] === 0 && data[i + 3] === 1) {
      starts.push({ at: i, codeLength: 4 });
      i += 3;
    }
  }
  const parts: Buffer[] = [];
  starts.forEach((start, index) => {
    const end = starts[index + 1]?.at ?? data.length;
    const unit = data.subarray(start.at + start.codeLength, end);
    const length = Buffer.alloc(4);
    length.writeUInt32BE(unit.length);
    parts.push(length, unit);
  });
  return Buffer.concat(parts);
}

/** An encoder context for `point` (a size and frame rate), opened; throws with FFmpeg's reason. */
async function openContext({ av, constants }: { av: NodeAv; constants: Constants }, settings: EncoderSettings, point: OperatingPoint, kbps: number): Promise<Context> {
  const names = { libx264: constants.FF_ENCODER_LIBX264, h264_nvenc: constants.FF_ENCODER_H264_NVENC, libvpx: constants.FF_ENCODER_LIBVPX_VP8 };
  const codec = av.Codec.findEncoderByName(names[settings.encoder]);
  if (!codec) throw new Error(`${settings.encoder} is not in node-av's FFmpeg`);
  const ctx = new av.CodecContext();
  ctx.allocContext3(codec);
  ctx.width = point.width;
  ctx.height = point.height;
  ctx.pixelFormat = constants.AV_PIX_FMT_YUV420P;
  ctx.timeBase = new av.Rational(1, point.fps);
  ctx.framerate = new av.Rational(point.fps, 1);
  ctx.gopSize = Math.max(1, Math.round((settings.keyframeIntervalFrames * point.fps) / settings.fps));
  ctx.maxBFrames = 0;
  applyRate(ctx, kbps, point.fps);
  const result = await ctx.open2(codec, av.Dictionary.fromObject(encoderOptions(settings)));
  if (result < 0) {
    ctx.freeContext();
    throw new Error(`${settings.encoder} did not open: ${new av.FFmpegError(result).message}`);
  }
  return ctx;
}

export class LibavVideoEncoder implements FrameEncoder {
  readonly settings: EncoderSettings;
  readonly codec: VideoCodec;
  readonly stats: EncoderStats;
  onAwaitingFrame: (() => void) | undefined;
  readonly #av: NodeAv;
  readonly #constants: Constants;
  readonly #log: Logger;
  readonly #onFrame: (frame: EncodedFrame) => void;
  readonly #onFatal: (reason: string) => void;
  #ctx: Context;
  readonly #frame: Frame;
  readonly #packet: InstanceType<NodeAv['Packet']>;
  readonly #degradation: DegradationPolicy | undefined;
  /** The size and frame rate encoded now (below the configured ones while the link is too slow). */
  #point: OperatingPoint;
  /** The full picture scaled to #point's size, when that is smaller. */
  #scaled: Scaled | undefined;
  #lastAcceptedMs = -Infinity;
  /** The link's estimate as last given, kbit/s (the encoder's own rate is clamped). */
  #estimateKbps: number;
  /** Encodes run one at a time, in order. */
  #chain: Promise<void> = Promise.resolve();
  #inFlight = 0;
  #pts = 0n;
  #running = false;
  #stopped = false;
  #primedKeyframe: EncodedFrame | undefined;
  #priming = false;
  #keyframeWanted = true;
  #lastKeyframeMs = -Infinity;
  #keyframeTimer: NodeJS.Timeout | undefined;
  #rateKbps: number;
  /** Keyframe requests merged into an earlier or later keyframe by the rate limit. */
  keyframeRequestsMerged = 0;
  rateChanges = 0;

  private constructor(settings: EncoderSettings, loadedAv: { av: NodeAv; constants: Constants }, ctx: Context, log: Logger,
    onFrame: (frame: EncodedFrame) => void, onFatal: (reason: string) => void, degradation: DegradationPolicy | undefined) {
    this.settings = settings;
    this.codec = codecOf(settings.encoder);
    this.#av = loadedAv.av;
    this.#constants = loadedAv.constants;
    this.#ctx = ctx;
    this.#log = log;
    this.#onFrame = onFrame;
    this.#onFatal = onFatal;
    this.#rateKbps = settings.bitrateKbps;
    this.#estimateKbps = settings.bitrateKbps;
    this.#degradation = degradation;
    this.#point = degradation?.point ?? { width: settings.width, height: settings.height, fps: settings.fps };
    this.stats = { encoder: settings.encoder, framesIn: 0, framesOut: 0, framesSkipped: 0, keyframes: 0, bytesOut: 0, restarts: 0, degradations: 0, recentEncodeMs: [] };
    this.#frame = new this.#av.Frame();
    this.#frame.alloc();
    this.#frame.width = settings.width;
    this.#frame.height = settings.height;
    this.#frame.format = this.#constants.AV_PIX_FMT_YUV420P;
    if (this.#frame.getBuffer() < 0) throw new Error('could not allocate an encoder frame');
    this.#packet = new this.#av.Packet();
    this.#packet.alloc();
  }

  /** Opens the encoder at `bitrateKbps`; throws with FFmpeg's reason when it cannot open (no NVENC, say). */
  static async open(settings: EncoderSettings, log: Logger, onFrame: (frame: EncodedFrame) => void, onFatal: (reason: string) => void,
    degradation?: DegradationPolicy): Promise<LibavVideoEncoder> {
    const loadedAv = await loadNodeAv();
    if ('error' in loadedAv) throw new Error(`node-av unavailable: ${loadedAv.error}`);
    const full = { width: settings.width, height: settings.height, fps: settings.fps };
    const ctx = await openContext(loadedAv, settings, full, settings.bitrateKbps);
    return new LibavVideoEncoder(settings, loadedAv, ctx, log, onFrame, onFatal, degradation);
  }

  get running(): boolean {
    return this.#running;
  }

  get awaitingFrame(): boolean {
    return this.#keyframeWanted && this.#running;
  }

  /** The rate the encoder aims at now, kbit/s. */
  get bitrateKbps(): number {
    return this.#rateKbps;
  }

  get pids(): number[] {
    return [];
  }

  prepare(): void { /* nothing to warm: the codec is open */ }

  /** Follows the bandwidth estimate from the next frame on; no keyframe, no new process. */
  setBitrate(kbps: number): void {
    this.#estimateKbps = kbps;
    const target = Math.round(Math.min(this.settings.bitrateKbps, Math.max(MIN_KBPS, kbps)));
    if (Math.abs(target - this.#rateKbps) < this.#rateKbps * MIN_CHANGE) return;
    this.#rateKbps = target;
    this.rateChanges++;
    // Applied between two encodes: the chain serialises it with them.
    this.#chain = this.#chain.then(() => applyRate(this.#ctx, target, this.#point.fps));
  }

  /** The size and frame rate encoded now. */
  get operatingPoint(): OperatingPoint {
    return this.#point;
  }

  /**
   * Follows the degradation policy through a fresh encoder context at the new size and frame rate (its
   * first frame is a keyframe). Frames come to the encoder at the new rate (the rest are skipped before
   * it). A lower rate in the same context would cost no keyframe, but libx264 budgets each frame by the
   * context's frame rate, whatever the timestamps say: at half the frames the link got half the rate, and
   * the estimate, bound to what arrives, stayed there after the link came back.
   */
  #followLink(nowMs: number): void {
    const point = this.#degradation?.update(this.#estimateKbps, nowMs);
    if (!point || point === this.#point) return;
    this.#log.info({ ...point, estimateKbps: Math.round(this.#estimateKbps), from: this.#point }, 'video operating point changed');
    this.#point = point;
    this.stats.degradations = (this.stats.degradations ?? 0) + 1;
    this.#chain = this.#chain.then(() => this.#reopen(point));
  }

  /** At a lower frame rate, a frame closer to the last than its interval (less half a source frame) is not encoded. */
  #belowRate(captureMs: number): boolean {
    const { fps } = this.#point;
    return fps < this.settings.fps && captureMs - this.#lastAcceptedMs < 1000 / fps - 500 / this.settings.fps;
  }

  async #reopen(point: OperatingPoint): Promise<void> {
    if (this.#stopped) return;
    const ctx = await openContext({ av: this.#av, constants: this.#constants }, this.settings, point, this.#rateKbps);
    this.#ctx.freeContext();
    this.#ctx = ctx;
    this.#pts = 0n;
    this.#freeScaled();
    if (point.width !== this.settings.width || point.height !== this.settings.height) this.#scaled = this.#scaler(point);
  }

  #scaler(point: OperatingPoint): Scaled {
    const av = this.#av;
    const { AV_PIX_FMT_YUV420P, SWS_AREA } = this.#constants;
    const frame = new av.Frame();
    frame.alloc();
    frame.width = point.width;
    frame.height = point.height;
    frame.format = AV_PIX_FMT_YUV420P;
    if (frame.getBuffer() < 0) throw new Error('could not allocate a scaled frame');
    const scaler = new av.SoftwareScaleContext();
    scaler.getContext(this.settings.width, this.settings.height, AV_PIX_FMT_YUV420P, point.width, point.height, AV_PIX_FMT_YUV420P, SWS_AREA);
    if (scaler.initContext() < 0) throw new Error('could not set up the scaler');
    return { frame, scaler };
  }

  #freeScaled(): void {
    this.#scaled?.frame.free();
    this.#scaled?.scaler.freeContext();
    this.#scaled = undefined;
  }

  prime(frame: Buffer, frameNumber: number, captureMs: number, done: () => void): boolean {
    if (this.#stopped || this.#running || this.#priming || this.#primedKeyframe) return false;
    this.#priming = true;
    this.stats.framesIn++;
    this.#encode(frame, frameNumber, captureMs, true, done, (encoded) => { this.#primedKeyframe = encoded; });
    return true;
  }

  start(): void {
    if (this.#stopped || this.#running) return;
    this.#running = true;
    const primed = this.#primedKeyframe;
    this.#primedKeyframe = undefined;
    if (primed) {
      this.#keyframeWanted = false;
      // Stamped as the frame just before the first live one, so RTP timing stays smooth.
      this.#deliver({ ...primed, captureMs: performance.now() - 1000 / this.settings.fps });
    } else {
      this.#keyframeWanted = true;
      this.onAwaitingFrame?.();
    }
  }

  submit(frame: Buffer, frameNumber: number, captureMs: number, done: () => void): boolean {
    if (!this.#running || this.#stopped) return false;
    this.#followLink(captureMs);
    if (this.#belowRate(captureMs)) return false;
    if (this.#inFlight > MAX_IN_FLIGHT) {
      this.stats.framesSkipped++;
      return false;
    }
    this.stats.framesIn++;
    this.#lastAcceptedMs = captureMs;
    const keyframe = this.#keyframeWanted;
    this.#keyframeWanted = false;
    this.#encode(frame, frameNumber, captureMs, keyframe, done, (encoded) => this.#deliver(encoded));
    return true;
  }

  /** PLI or a new receiver: the next frame is a keyframe, at most one per KEYFRAME_MIN_INTERVAL_MS. */
  requestKeyframe(reason: string): void {
    if (!this.#running || this.#stopped) return;
    if (this.#keyframeWanted || this.#keyframeTimer) {
      this.keyframeRequestsMerged++;
      return;
    }
    const wait = this.#lastKeyframeMs + KEYFRAME_MIN_INTERVAL_MS - performance.now();
    const want = (): void => {
      this.#keyframeTimer = undefined;
      if (!this.#running || this.#stopped) return;
      this.#keyframeWanted = true;
      this.#log.debug({ reason }, 'keyframe requested');
      this.onAwaitingFrame?.();
    };
    if (wait <= 0) want();
    else this.#keyframeTimer = setTimeout(want, wait);
  }

  #encode(data: Buffer, frameNumber: number, captureMs: number, keyframe: boolean, done: () => void, emit: (frame: EncodedFrame) => void): void {
    this.#inFlight++;
    const submittedMs = performance.now();
    this.#chain = this.#chain.then(async () => {
      if (this.#stopped) return;
      // Counted here, in encode order: a fresh context (a new operating point) starts from 0.
      const pts = this.#pts++;
      const { AV_PICTURE_TYPE_I, AV_PICTURE_TYPE_NONE } = this.#constants;
      this.#frame.makeWritable();
      // node-av's fromBuffer wraps the buffer rather than copying it: the buffer goes back to the source
      // only once the encoder has taken the picture (below, in finally). Given back before, the source
      // filled it with a later frame while a loaded machine's worker thread had yet to read it.
      this.#frame.fromBuffer(data);
      let picture = this.#frame;
      if (this.#scaled) {
        picture = this.#scaled.frame;
        picture.makeWritable();
        const scaled = await this.#scaled.scaler.scaleFrame(picture, this.#frame);
        if (scaled < 0) throw new Error(`scaling failed: ${new this.#av.FFmpegError(scaled).message}`);
      }
      picture.pts = pts;
      picture.pictType = keyframe ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE;
      // The encoding happens in avcodec_send_frame, which keeps the packet it made: on the thread pool.
      // Taking the packet is a hand-over, done here rather than in two more round trips to the pool, each a
      // wake-up that a loaded host's scheduler delays (at load 8-10: 153 ms a frame against 23).
      const sent = await this.#ctx.sendFrame(picture);
      if (sent < 0) throw new Error(`encode failed: ${new this.#av.FFmpegError(sent).message}`);
      const parts: Buffer[] = [];
      let isKey = false;
      let qp: number | undefined;
      while (!this.#stopped && this.#ctx.receivePacketSync(this.#packet) >= 0) {
        const bytes = this.#packet.data;
        if (bytes) parts.push(Buffer.from(bytes));
        isKey ||= this.#packet.isKeyframe;
        qp ??= qpOf(this.#packet.getSideData(this.#constants.AV_PKT_DATA_QUALITY_STATS));
        this.#packet.unref();
      }
      if (parts.length === 0 || this.#stopped) return;
      const raw = parts.length === 1 ? parts[0] : Buffer.concat(parts);
      const payload = this.codec === 'H264' ? annexBToLengthPrefixed(raw) : raw;
      emit({ data: payload, keyframe: isKey, frameNumber, captureMs, encodeMs: performance.now() - submittedMs, qp });
    }).catch((error: unknown) => {
      if (!this.#stopped) this.#onFatal((error as Error).message);
    }).finally(() => {
      done();
      this.#inFlight--;
      if (keyframe) this.#priming = false;
    });
  }

  #deliver(frame: EncodedFrame): void {
    const s = this.stats;
    s.framesOut++;
    s.bytesOut += frame.data.length;
    if (frame.keyframe) {
      s.keyframes++;
      this.#lastKeyframeMs = performance.now();
    }
    if (s.recentEncodeMs.length === RECENT_SAMPLES) s.recentEncodeMs.shift();
    s.recentEncodeMs.push(frame.encodeMs);
    // The policy's QP thresholds are H.264's (libx264 and NVENC report one; libvpx does not).
    if (this.codec === 'H264' && !frame.keyframe && frame.qp !== undefined) this.#degradation?.noteQp(frame.qp, frame.captureMs);
    this.#onFrame(frame);
  }

  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#running = false;
    if (this.#keyframeTimer) clearTimeout(this.#keyframeTimer);
    // Freed after the encode in progress, if any, has returned.
    void this.#chain.finally(() => {
      this.#ctx.freeContext();
      this.#frame.free();
      this.#packet.free();
      this.#freeScaled();
    });
  }
}

/**
 * Opens the first in-process encoder that works: the configured one, or h264_nvenc (where an NVIDIA
 * device exists), libx264, libvpx. Throws with every reason when none opens.
 */
export async function openInProcessEncoder(
  wanted: 'auto' | EncoderName,
  base: Omit<EncoderSettings, 'encoder'>,
  log: Logger,
  onFrame: (frame: EncodedFrame) => void,
  onFatal: (reason: string) => void,
  degradation?: DegradationPreference,
): Promise<LibavVideoEncoder> {
  const candidates: EncoderName[] = wanted === 'auto' ? ['h264_nvenc', 'libx264', 'libvpx'] : [wanted];
  if (wanted === 'auto' && !NVIDIA_DEVICES.some((device) => existsSync(device))) candidates.shift();
  const failures: string[] = [];
  for (const encoder of candidates) {
    try {
      const policy = degradation && new DegradationPolicy(degradation, base);
      const opened = await LibavVideoEncoder.open({ ...base, encoder }, log, onFrame, onFatal, policy);
      log.info({ encoder, backend: 'libav', codec: codecOf(encoder), width: base.width, height: base.height, fps: base.fps, maxBitrateKbps: base.bitrateKbps, degradation },
        'video encoder selected');
      return opened;
    } catch (error) {
      failures.push(`${encoder}: ${(error as Error).message}`);
      log.info({ encoder, backend: 'libav', reason: (error as Error).message }, 'video encoder unavailable');
    }
  }
  throw new Error(`no in-process video encoder (${failures.join('; ')})`);
}
