// Every setting of the streaming container comes from the environment, validated once at start-up.
// A bad value stops the process with one line naming the variable: the platform's worker shows that
// line to the function owner, so it has to be readable without a stack trace.
import { spawnSync } from 'node:child_process';
import { networkInterfaces } from 'node:os';
import { isIPv4 } from 'node:net';
import { z } from 'zod';
import type { DegradationPreference } from './degradation.ts';
import { defaultFfmpeg } from './ffmpeg-binary.ts';
import { which } from './which.ts';

const port = z.coerce.number().int().min(1).max(65535);

const portRange = z.string().trim().transform((text, ctx) => {
  const match = /^(\d{1,5})\s*-\s*(\d{1,5})$/.exec(text);
  const min = match ? Number(match[1]) : NaN;
  const max = match ? Number(match[2]) : NaN;
  // werift needs at least two ports (min must differ from max): one host socket and one TURN socket.
  if (!match || min < 1 || max > 65535 || min >= max) {
    ctx.addIssue({ code: 'custom', message: `must be "min-max" with 1 <= min < max <= 65535 (got "${text}")` });
    return z.NEVER;
  }
  return { min, max };
});

const videoSize = z.string().trim().transform((text, ctx) => {
  const match = /^(\d{2,4})x(\d{2,4})$/.exec(text);
  const width = match ? Number(match[1]) : NaN;
  const height = match ? Number(match[2]) : NaN;
  // 4:2:0 chroma needs even sizes; the frame barcode needs 32 cells of at least 2 pixels.
  if (!match || width % 2 || height % 2 || width < 64 || height < 64 || width > 4096 || height > 2304) {
    ctx.addIssue({ code: 'custom', message: `must be "WIDTHxHEIGHT", even, between 64x64 and 4096x2304 (got "${text}")` });
    return z.NEVER;
  }
  return { width, height };
});

const flag = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');
const autoFlag = z.enum(['auto', 'true', 'false', '1', '0']).transform((v) => (v === 'auto' ? undefined : v === 'true' || v === '1'));

const envSchema = z.object({
  CONTROL_SERVER_PORT: port.default(8011),
  STREAMING_SERVER_PORT: port.default(49100),
  STREAMING_START_ENDPOINT: z.string().regex(/^\/[A-Za-z0-9._~\/-]*$/, 'must be a URL path starting with "/"').default('/sign_in'),
  STREAMING_PORT_BINDING_RANGE: portRange.default({ min: 47998, max: 48020 }),
  /** Local IPv4 address every media socket binds to and advertises as its host candidate. */
  STREAMING_BIND_ADDRESS: z.string().refine(isIPv4, 'must be an IPv4 address').optional(),
  STREAMING_RESUME_WINDOW_SECONDS: z.coerce.number().int().min(0).max(300).default(60),
  /** Interval at which the client is told to ping; a connection silent for 3 intervals is treated as dropped. */
  STREAMING_KEEPALIVE_MS: z.coerce.number().int().min(250).max(5000).default(2000),
  /** Peer connection must reach "connected" this long after the offer, or the session ends. */
  STREAMING_CONNECT_TIMEOUT_SECONDS: z.coerce.number().int().min(1).max(300).default(30),
  /** How long the control server keeps answering 500 after the session before the process exits. */
  STREAMING_EXIT_DELAY_MS: z.coerce.number().int().min(0).max(60_000).default(1000),
  STREAMING_ENCODER: z.enum(['auto', 'h264_nvenc', 'libx264', 'libvpx']).default('auto'),
  STREAMING_ENCODER_BACKEND: z.enum(['auto', 'libav', 'ffmpeg']).default('auto'),
  STREAMING_MIN_BITRATE_KBPS: z.coerce.number().int().min(50).max(100_000).default(300),
  STREAMING_START_BITRATE_KBPS: z.coerce.number().int().min(50).max(100_000).default(1500),
  /** What gives way when the link is too slow for the full picture (in-process encoder only). */
  STREAMING_DEGRADATION: z.enum(['maintain-framerate', 'maintain-resolution', 'balanced', 'disabled']).default('balanced'),
  STREAMING_VIDEO_SIZE: videoSize.default({ width: 1280, height: 720 }),
  STREAMING_VIDEO_FPS: z.coerce.number().int().min(1).max(240).default(60),
  STREAMING_VIDEO_BITRATE_KBPS: z.coerce.number().int().min(100).max(100_000).default(6000),
  /** Periodic keyframe as a safety net; keyframes are also produced on connect and on every PLI. */
  STREAMING_KEYFRAME_INTERVAL_SECONDS: z.coerce.number().int().min(1).max(600).default(10),
  STREAMING_SERVE_CLIENT: flag.default(true),
  /** Where frames come from: the built-in test scene, an X11 application, or raw frames on a socket. */
  STREAMING_SOURCE: z.enum(['auto', 'scene', 'x11', 'pipe']).default('auto'),
  /** The application, run with /bin/sh -c (x11 and pipe sources). */
  STREAMING_APP_COMMAND: z.string().max(8192).optional(),
  /** An X display to use instead of starting Xvfb, e.g. ":0". */
  STREAMING_DISPLAY: z.string().regex(/^[A-Za-z0-9._-]*:\d+(\.\d+)?$/, 'must be an X display such as ":0"').optional(),
  /** The application must show a window (x11) or send a first frame (pipe) this soon after it starts. */
  STREAMING_APP_START_TIMEOUT_SECONDS: z.coerce.number().int().min(1).max(600).default(30),
  /** Unix socket the pipe source listens on (default: a fresh path under the temporary directory). */
  STREAMING_FRAME_PIPE: z.string().startsWith('/', 'must be an absolute path').max(100).optional(),
  /** The application's sound as an Opus track: auto = when PulseAudio is installed and an app runs. */
  STREAMING_AUDIO: autoFlag.prefault('auto'),
  /** The browser delays the picture to match the sound (costs input-to-photon), instead of showing it at once. */
  STREAMING_LIP_SYNC: flag.default(false),
  /** Video FEC (FlexFEC on a stream of its own) while the link loses packets, when the browser accepts it. */
  STREAMING_VIDEO_FEC: flag.default(true),
  /** The frame barcode (frame number, input sequence) in the top strip: auto = only for the scene. */
  STREAMING_FRAME_BARCODE: autoFlag.prefault('auto'),
  FFMPEG_PATH: z.string().min(1).default(defaultFfmpeg),
  XVFB_PATH: z.string().min(1).default('Xvfb'),
  PULSEAUDIO_PATH: z.string().min(1).default('pulseaudio'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Config = {
  controlPort: number;
  streamingPort: number;
  startEndpoint: string;
  portRange: { min: number; max: number };
  bindAddress: string;
  resumeWindowMs: number;
  keepaliveMs: number;
  connectTimeoutMs: number;
  exitDelayMs: number;
  encoder: 'auto' | 'h264_nvenc' | 'libx264' | 'libvpx';
  /** In-process libavcodec (rate follows the link), the ffmpeg CLI (fixed rate), or the first that works. */
  encoderBackend: 'auto' | 'libav' | 'ffmpeg';
  /** The bandwidth estimate's floor and starting point, kbit/s (capped at bitrateKbps). */
  minBitrateKbps: number;
  startBitrateKbps: number;
  degradation: DegradationPreference;
  width: number;
  height: number;
  fps: number;
  bitrateKbps: number;
  keyframeIntervalSeconds: number;
  serveClient: boolean;
  /** The frame source in use, and why it was chosen (logged at start-up). */
  source: { kind: SourceKind; reason: string };
  appCommand: string | undefined;
  /** An existing X display; undefined: start Xvfb. */
  display: string | undefined;
  appStartTimeoutMs: number;
  framePipe: string | undefined;
  /** `required`: asked for explicitly, so a sound server that fails to start fails the container. */
  audio: { enabled: boolean; required: boolean; reason: string };
  lipSync: boolean;
  videoFec: boolean;
  barcode: boolean;
  ffmpegPath: string;
  xvfbPath: string;
  pulseaudioPath: string;
  logLevel: string;
};

export type SourceKind = 'scene' | 'x11' | 'pipe';

export class ConfigError extends Error {}

/** First non-internal IPv4 address, so that a session uses exactly one host socket. */
function defaultBindAddress(): string | undefined {
  const names = Object.keys(networkInterfaces()).sort();
  for (const name of names) {
    for (const info of networkInterfaces()[name] ?? []) {
      if (info.family === 'IPv4' && !info.internal && !info.address.startsWith('169.254.')) return info.address;
    }
  }
  return undefined;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  // An empty variable means "not set", as shells and compose files often export blanks.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    throw new ConfigError(`invalid configuration: ${problems.join('; ')}`);
  }
  const e = parsed.data;
  const bindAddress = e.STREAMING_BIND_ADDRESS ?? defaultBindAddress();
  if (!bindAddress) throw new ConfigError('invalid configuration: STREAMING_BIND_ADDRESS: no non-loopback IPv4 interface found; set it explicitly');
  if (e.CONTROL_SERVER_PORT === e.STREAMING_SERVER_PORT) {
    throw new ConfigError('invalid configuration: CONTROL_SERVER_PORT and STREAMING_SERVER_PORT must differ');
  }
  const command = e.STREAMING_APP_COMMAND?.trim() || undefined;
  const source = chooseSource(e.STREAMING_SOURCE, command, e.STREAMING_DISPLAY, which(e.XVFB_PATH, env.PATH) !== undefined, env.PATH);
  const audio = chooseAudio(e.STREAMING_AUDIO, source.kind, which(e.PULSEAUDIO_PATH, env.PATH) !== undefined);
  return {
    controlPort: e.CONTROL_SERVER_PORT,
    streamingPort: e.STREAMING_SERVER_PORT,
    startEndpoint: e.STREAMING_START_ENDPOINT,
    portRange: e.STREAMING_PORT_BINDING_RANGE,
    bindAddress,
    resumeWindowMs: e.STREAMING_RESUME_WINDOW_SECONDS * 1000,
    keepaliveMs: e.STREAMING_KEEPALIVE_MS,
    connectTimeoutMs: e.STREAMING_CONNECT_TIMEOUT_SECONDS * 1000,
    exitDelayMs: e.STREAMING_EXIT_DELAY_MS,
    encoder: e.STREAMING_ENCODER,
    encoderBackend: e.STREAMING_ENCODER_BACKEND,
    minBitrateKbps: Math.min(e.STREAMING_MIN_BITRATE_KBPS, e.STREAMING_VIDEO_BITRATE_KBPS),
    startBitrateKbps: Math.min(e.STREAMING_START_BITRATE_KBPS, e.STREAMING_VIDEO_BITRATE_KBPS),
    degradation: e.STREAMING_DEGRADATION,
    width: e.STREAMING_VIDEO_SIZE.width,
    height: e.STREAMING_VIDEO_SIZE.height,
    fps: e.STREAMING_VIDEO_FPS,
    bitrateKbps: e.STREAMING_VIDEO_BITRATE_KBPS,
    keyframeIntervalSeconds: e.STREAMING_KEYFRAME_INTERVAL_SECONDS,
    serveClient: e.STREAMING_SERVE_CLIENT,
    source,
    appCommand: source.kind === 'scene' ? undefined : command,
    display: e.STREAMING_DISPLAY,
    appStartTimeoutMs: e.STREAMING_APP_START_TIMEOUT_SECONDS * 1000,
    framePipe: e.STREAMING_FRAME_PIPE,
    audio,
    lipSync: e.STREAMING_LIP_SYNC,
    videoFec: e.STREAMING_VIDEO_FEC,
    barcode: e.STREAMING_FRAME_BARCODE ?? source.kind === 'scene',
    ffmpegPath: e.FFMPEG_PATH,
    xvfbPath: e.XVFB_PATH,
    pulseaudioPath: e.PULSEAUDIO_PATH,
    logLevel: e.LOG_LEVEL,
  };
}

/**
 * `auto` streams the application when one is configured, a display can be had and the app's program is
 * installed, else the test scene.
 */
function chooseSource(wanted: 'auto' | SourceKind, command: string | undefined, display: string | undefined, hasXvfb: boolean, path: string | undefined): Config['source'] {
  const displayAvailable = display !== undefined || hasXvfb;
  if (wanted === 'scene') return { kind: 'scene', reason: 'STREAMING_SOURCE=scene' };
  if (wanted === 'auto') {
    if (!command) return { kind: 'scene', reason: 'no STREAMING_APP_COMMAND: streaming the test scene' };
    if (!displayAvailable) return { kind: 'scene', reason: 'STREAMING_APP_COMMAND is set but Xvfb is not installed (Debian package xvfb) and no STREAMING_DISPLAY is given: streaming the test scene' };
    const missing = missingProgram(command, path);
    if (missing) return { kind: 'scene', reason: `STREAMING_APP_COMMAND starts ${missing}, which is not installed: streaming the test scene` };
    return { kind: 'x11', reason: `STREAMING_APP_COMMAND is set and ${display ? `STREAMING_DISPLAY=${display}` : 'Xvfb is installed'}` };
  }
  if (!command) throw new ConfigError(`invalid configuration: STREAMING_APP_COMMAND: required with STREAMING_SOURCE=${wanted}`);
  if (wanted === 'x11' && !displayAvailable) {
    throw new ConfigError('invalid configuration: STREAMING_SOURCE: x11 needs Xvfb (Debian package xvfb, or XVFB_PATH) or an existing STREAMING_DISPLAY');
  }
  return { kind: wanted, reason: `STREAMING_SOURCE=${wanted}` };
}

/**
 * The first word of a plain command (`xterm …`, `exec xterm …`) when the shell cannot run it; undefined
 * when it can, or when the command is not that simple (the shell decides then, at start-up).
 */
function missingProgram(command: string, path: string | undefined): string | undefined {
  const words = command.split(/\s+/);
  const first = words[0] === 'exec' ? words[1] : words[0];
  if (!first || !/^[\w./+-]+$/.test(first) || which(first, path)) return undefined;
  // Not on PATH, but it may be a shell builtin or keyword (trap, while, …).
  const shell = spawnSync('/bin/sh', ['-c', 'command -v -- "$1"', 'sh', first], { env: { PATH: path ?? '' }, stdio: 'ignore' });
  return shell.status === 0 ? undefined : first;
}

function chooseAudio(wanted: boolean | undefined, source: SourceKind, hasPulse: boolean): Config['audio'] {
  if (wanted === false) return { enabled: false, required: false, reason: 'STREAMING_AUDIO=false' };
  if (source === 'scene') {
    if (wanted) throw new ConfigError('invalid configuration: STREAMING_AUDIO: the test scene has no sound; audio needs the x11 or pipe source');
    return { enabled: false, required: false, reason: 'the test scene has no sound' };
  }
  if (!hasPulse) {
    if (wanted) throw new ConfigError('invalid configuration: STREAMING_AUDIO: needs PulseAudio (Debian package pulseaudio, or PULSEAUDIO_PATH)');
    return { enabled: false, required: false, reason: 'PulseAudio is not installed (Debian package pulseaudio)' };
  }
  return { enabled: true, required: wanted === true, reason: wanted ? 'STREAMING_AUDIO=true' : 'PulseAudio is installed' };
}
