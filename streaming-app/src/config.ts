// Every setting of the streaming container comes from the environment, validated once at start-up.
// A bad value stops the process with one line naming the variable: the platform's worker shows that
// line to the function owner, so it has to be readable without a stack trace.
import { networkInterfaces } from 'node:os';
import { isIPv4 } from 'node:net';
import { z } from 'zod';
import { defaultFfmpeg } from './ffmpeg-binary.ts';

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
  STREAMING_VIDEO_SIZE: videoSize.default({ width: 1280, height: 720 }),
  STREAMING_VIDEO_FPS: z.coerce.number().int().min(1).max(240).default(60),
  STREAMING_VIDEO_BITRATE_KBPS: z.coerce.number().int().min(100).max(100_000).default(6000),
  /** Periodic keyframe as a safety net; keyframes are also produced on connect and on every PLI. */
  STREAMING_KEYFRAME_INTERVAL_SECONDS: z.coerce.number().int().min(1).max(600).default(10),
  STREAMING_SERVE_CLIENT: flag.default(true),
  FFMPEG_PATH: z.string().min(1).default(defaultFfmpeg),
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
  width: number;
  height: number;
  fps: number;
  bitrateKbps: number;
  keyframeIntervalSeconds: number;
  serveClient: boolean;
  ffmpegPath: string;
  logLevel: string;
};

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
    width: e.STREAMING_VIDEO_SIZE.width,
    height: e.STREAMING_VIDEO_SIZE.height,
    fps: e.STREAMING_VIDEO_FPS,
    bitrateKbps: e.STREAMING_VIDEO_BITRATE_KBPS,
    keyframeIntervalSeconds: e.STREAMING_KEYFRAME_INTERVAL_SECONDS,
    serveClient: e.STREAMING_SERVE_CLIENT,
    ffmpegPath: e.FFMPEG_PATH,
    logLevel: e.LOG_LEVEL,
  };
}
