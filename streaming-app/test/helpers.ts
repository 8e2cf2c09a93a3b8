// Test helpers: the real app as a child process on free ports, a WebSocket signaling client, a werift
// viewer that answers like a browser and decodes what it receives with ffmpeg, and a look at the UDP
// sockets a process holds (Linux /proc). Nothing here mocks the app.
import { spawn, type ChildProcess } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism, loadavg } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RTCPeerConnection, useH264, useVP8, type RTCDataChannel, type RtpPacket } from 'werift';
import { DepacketizeBase } from 'werift/nonstandard';
import type { Page } from 'playwright-core';
import { WebSocket } from 'ws';
import { barcodeLayout, decodeBarcode } from '../client/barcode.ts';
import type { ClientMessage, ServerMessage } from '../client/protocol.ts';
import { loadConfig } from '../src/config.ts';

export const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));
export const BIND_ADDRESS = loadConfig({}).bindAddress;

/** Full path of an executable on PATH, or undefined. */
export function which(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const candidate = join(dir, name);
    if (dir && existsSync(candidate)) return candidate;
  }
  return undefined;
}

/**
 * Skip reason for a test that needs external tools, or false to run it. In CI (CI set) the test always
 * runs, so a missing tool fails it instead of silently skipping.
 */
export function missingTools(tools: { name: string; path?: string; install: string }[]): string | false {
  if (process.env.CI) return false;
  const missing = tools.filter((t) => !(t.path ? existsSync(t.path) : which(t.name)));
  if (missing.length === 0) return false;
  return `needs ${missing.map((t) => t.name).join(', ')}: install ${missing.map((t) => t.install).join(', ')}`;
}

export const FFMPEG = { name: 'ffmpeg', install: 'Debian package ffmpeg' };
export const CHROMIUM = { name: 'chromium', path: '/usr/bin/chromium', install: 'Debian package chromium' };
export const COTURN = { name: 'turnserver', install: 'Debian package coturn' };
export const XVFB = { name: 'Xvfb', install: 'Debian package xvfb' };
export const XTERM = { name: 'xterm', install: 'Debian package xterm' };
export const PULSEAUDIO = { name: 'pulseaudio', install: 'Debian package pulseaudio' };

export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** Dark pixels in a rectangle of the video as shown (text is black on the xterm's white). */
export function darkPixels(page: Page, x: number, y: number, w: number, h: number): Promise<number> {
  return page.evaluate(`(() => {
    const video = document.querySelector('video');
    const canvas = document.createElement('canvas');
    canvas.width = video.videoWidth;
    canvas.height = video.videoHeight;
    const ctx = canvas.getContext('2d');
    ctx.drawImage(video, 0, 0);
    const data = ctx.getImageData(${x}, ${y}, ${w}, ${h}).data;
    let dark = 0;
    for (let i = 0; i < data.length; i += 4) if (data[i] + data[i + 1] + data[i + 2] < 200) dark++;
    return dark;
  })()`) as Promise<number>;
}

/** An app command: a 440 Hz tone into the container's sound server (PULSE_SERVER, PULSE_SINK), for ever. */
export const TONE = 'ffmpeg -hide_banner -loglevel error -re -f lavfi -i sine=frequency=440:sample_rate=48000 -f pulse tone';

export type AudioStats = { packetsReceived?: number; totalAudioEnergy?: number; codec?: string };

/** The client page's received audio: its inbound-rtp statistics, with its codec's MIME type. */
export function audioStats(page: Page): Promise<AudioStats> {
  return page.evaluate(`svcStream.client.peerConnection?.getStats().then((report) => {
    let inbound = {};
    const codecs = {};
    report.forEach((s) => { if (s.type === 'codec') codecs[s.id] = s.mimeType; });
    report.forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'audio') inbound = { ...s, codec: codecs[s.codecId] }; });
    return inbound;
  }) ?? {}`) as Promise<AudioStats>;
}

/** Page script: Enter, then Ctrl+D, which ends a `cat` in a terminal (and the terminal with it). */
export const END_OF_INPUT = `(() => {
  svcStream.sendKeyCode('Enter', 'Enter', true, 0);
  svcStream.sendKeyCode('Enter', 'Enter', false, 0);
  svcStream.sendKeyCode('ControlLeft', 'Control', true, 2);
  svcStream.sendKeyCode('KeyD', 'd', true, 2);
  svcStream.sendKeyCode('KeyD', 'd', false, 2);
  svcStream.sendKeyCode('ControlLeft', 'Control', false, 0);
})()`;

/** Runs the app until it exits by itself (a start-up failure): its exit code, stdout and stderr. */
export async function runToExit(env: Record<string, string>, timeoutMs = 30_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [MAIN], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  clearTimeout(timer);
  return { code, stdout, stderr };
}

/**
 * Where a process stands (Linux /proc), for a timeout's message: its state, the CPU it has used (a
 * process starved of the CPU has used little and is runnable; a blocked one sleeps somewhere), its
 * threads, and the machine's load.
 */
export function processSnapshot(pid: number | undefined): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // After the command's closing parenthesis: state (field 3), …, utime (14), stime (15), …, threads (20).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cpuMs = (Number(fields[11]) + Number(fields[12])) * 10; // clock ticks of 10 ms (USER_HZ 100)
    const wchan = readFileSync(`/proc/${pid}/wchan`, 'utf8') || '-';
    return `state ${fields[0]}, ${cpuMs} ms of CPU, ${fields[17]} threads, waiting in ${wchan}; load ${loadavg().map((l) => l.toFixed(1)).join(' ')}`;
  } catch {
    return 'no longer running';
  }
}

/** Every live descendant of a process (Linux /proc), e.g. the helpers a streaming container started. */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch { /* gone meanwhile */ }
  }
  const found: number[] = [];
  const walk = (parent: number): void => {
    for (const child of children.get(parent) ?? []) { found.push(child); walk(child); }
  };
  walk(pid);
  return found;
}

/** Pids from `pids` that are still alive (zombies count as gone). */
export function alive(pids: number[]): number[] {
  return pids.filter((pid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
    } catch {
      return false;
    }
  });
}

export function freeTcpPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function udpFree(port: number, address: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createSocket('udp4');
    socket.once('error', () => { socket.close(); resolve(false); });
    socket.bind({ port, address, exclusive: true }, () => socket.close(() => resolve(true)));
  });
}

/** The platform's fixed default ports in the range drawn from: another process may hold them. */
const PLATFORM_DEFAULTS = { min: 47_998, max: 49_100 };

/**
 * A random block of `size` consecutive free UDP ports, so parallel test files do not collide; never the
 * platform's defaults (its streaming range 47998-48020, the demo proxy's 49100).
 */
export async function freeUdpRange(size: number): Promise<{ min: number; max: number }> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const min = 20_000 + Math.floor(Math.random() * 30_000);
    if (min <= PLATFORM_DEFAULTS.max && min + size - 1 >= PLATFORM_DEFAULTS.min) continue;
    let ok = true;
    for (let port = min; port < min + size && ok; port++) ok = await udpFree(port, BIND_ADDRESS) && await udpFree(port, '0.0.0.0');
    if (ok) return { min, max: min + size - 1 };
  }
  throw new Error('no free UDP port range');
}

export type AppLog = { level: number; msg: string; [key: string]: unknown };

export type AppProcess = {
  child: ChildProcess;
  pid: number;
  controlPort: number;
  streamingPort: number;
  range: { min: number; max: number };
  logs: AppLog[];
  stderr: () => string;
  controlUrl(path: string): string;
  signalingUrl(query?: string): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  waitForLog(predicate: (log: AppLog) => boolean, timeoutMs?: number): Promise<AppLog>;
  readyStatus(): Promise<number>;
  stop(): Promise<void>;
};

/**
 * Starts `node streaming-app/src/main.ts` with small video by default; resolves once it listens. A port
 * found free can be taken by another process before the app binds it (its encoder probe takes a while):
 * then it starts again on others.
 */
export async function startApp(env: Record<string, string> = {}): Promise<AppProcess> {
  for (let attempt = 1; ; attempt++) {
    const app = await startAppOnce(env);
    if (!app.logs.some(portTaken) || attempt === 3) return app;
    await app.stop();
  }
}

const portTaken = (log: AppLog) => JSON.stringify(log).includes('EADDRINUSE');

async function startAppOnce(env: Record<string, string>): Promise<AppProcess> {
  const controlPort = await freeTcpPort();
  const streamingPort = await freeTcpPort();
  const range = await freeUdpRange(6);
  const child = spawn(process.execPath, [MAIN], {
    env: {
      ...process.env,
      CONTROL_SERVER_PORT: String(controlPort),
      STREAMING_SERVER_PORT: String(streamingPort),
      STREAMING_PORT_BINDING_RANGE: `${range.min}-${range.max}`,
      STREAMING_VIDEO_SIZE: '320x180',
      STREAMING_VIDEO_BITRATE_KBPS: '800',
      STREAMING_EXIT_DELAY_MS: '400',
      LOG_LEVEL: 'debug',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: AppLog[] = [];
  const waiters = new Set<() => void>();
  let stderr = '';
  let partial = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.trim()) continue;
      try { logs.push(JSON.parse(line) as AppLog); } catch { logs.push({ level: 0, msg: line }); }
    }
    for (const wake of waiters) wake();
  });
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => {
      for (const wake of waiters) wake();
      resolve({ code, signal });
    });
  });
  let hasExited = false;
  void exited.then(() => { hasExited = true; });

  const waitForLog = (predicate: (log: AppLog) => boolean, timeoutMs = 15_000): Promise<AppLog> => new Promise((resolve, reject) => {
    const check = (): boolean => {
      const found = logs.find(predicate);
      if (found) { done(); resolve(found); return true; }
      if (hasExited) { done(); reject(new Error(`app exited before the expected log line; stderr: ${stderr.slice(-500)}`)); return true; }
      return false;
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`timed out after ${timeoutMs} ms waiting for a log line; last: ${JSON.stringify(logs.slice(-3))}; stderr: ${JSON.stringify(stderr.slice(-300))}; `
        + `the app: ${processSnapshot(child.pid)}`));
    }, timeoutMs);
    const wake = (): void => { check(); };
    const done = (): void => { clearTimeout(timer); waiters.delete(wake); };
    waiters.add(wake);
    check();
  });

  // An app that never listens is not left behind.
  await waitForLog((l) => l.msg === 'streaming app listening' || portTaken(l), 30_000).catch(async (error: unknown) => {
    if (!hasExited) child.kill('SIGKILL');
    await exited;
    throw error;
  });
  const app: AppProcess = {
    child,
    pid: child.pid ?? 0,
    controlPort,
    streamingPort,
    range,
    logs,
    stderr: () => stderr,
    controlUrl: (path) => `http://127.0.0.1:${controlPort}${path}`,
    signalingUrl: (query = '') => `ws://127.0.0.1:${streamingPort}/sign_in${query}`,
    exited,
    waitForLog,
    readyStatus: async () => (await fetch(`http://127.0.0.1:${controlPort}/v1/streaming/ready`)).status,
    stop: async () => {
      if (!hasExited) child.kill('SIGKILL');
      await exited;
    },
  };
  return app;
}

/** Local UDP ports of the sockets a process holds, read from /proc (Linux only; undefined elsewhere). */
export function udpPortsOf(pid: number): number[] | undefined {
  if (!existsSync(`/proc/${pid}/fd`)) return undefined;
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match) inodes.add(match[1]);
    } catch { /* fd closed meanwhile */ }
  }
  const ports: number[] = [];
  for (const table of ['udp', 'udp6']) {
    const path = `/proc/${pid}/net/${table}`;
    if (!existsSync(path)) continue;
    for (const line of readFileSync(path, 'utf8').split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields.length < 10 || !inodes.has(fields[9])) continue;
      ports.push(parseInt(fields[1].split(':')[1], 16));
    }
  }
  return ports.sort((a, b) => a - b);
}

/** A signaling connection with a queue of received messages. */
export class SignalingClient {
  readonly ws: WebSocket;
  readonly received: ServerMessage[] = [];
  readonly opened: Promise<void>;
  readonly closed: Promise<{ code: number; reason: string }>;
  #waiters = new Set<() => void>();
  #isClosed = false;

  constructor(url: string) {
    this.ws = new WebSocket(url);
    this.opened = new Promise((resolve, reject) => {
      this.ws.once('open', () => resolve());
      this.ws.once('error', reject);
    });
    this.opened.catch(() => { /* reported through closed */ });
    this.closed = new Promise((resolve) => {
      this.ws.on('close', (code: number, reason: Buffer) => {
        this.#isClosed = true;
        for (const wake of this.#waiters) wake();
        resolve({ code, reason: reason.toString() });
      });
    });
    this.ws.on('error', () => { /* surfaced by close */ });
    this.ws.on('message', (data: Buffer) => {
      this.received.push(JSON.parse(data.toString()) as ServerMessage);
      for (const wake of this.#waiters) wake();
    });
  }

  send(message: ClientMessage): void {
    this.ws.send(JSON.stringify(message));
  }

  /** Resolves with the first received message of `type` not taken before. */
  next<T extends ServerMessage['type']>(type: T, timeoutMs = 15_000): Promise<Extract<ServerMessage, { type: T }>> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        const index = this.received.findIndex((m) => m.type === type);
        if (index >= 0) {
          const [message] = this.received.splice(index, 1);
          done();
          resolve(message as Extract<ServerMessage, { type: T }>);
          return true;
        }
        if (this.#isClosed) { done(); reject(new Error(`connection closed while waiting for ${type}`)); return true; }
        return false;
      };
      const timer = setTimeout(() => { done(); reject(new Error(`timed out waiting for ${type}`)); }, timeoutMs);
      const wake = (): void => { check(); };
      const done = (): void => { clearTimeout(timer); this.#waiters.delete(wake); };
      this.#waiters.add(wake);
      check();
    });
  }
}

export type DecodedFrame = { frameNumber: number; inputSeq: number };

/**
 * Plays the browser's part with werift: answers the app's offer, trickles candidates, receives the
 * video track and keeps the depacketized access units, which decodeFrames() runs through ffmpeg.
 */
export class WeriftViewer {
  readonly url: string;
  signaling: SignalingClient;
  pc: RTCPeerConnection | undefined;
  config: Extract<ServerMessage, { type: 'config' }> | undefined;
  /** Candidates the app trickled (including the end-of-candidates null). */
  readonly remoteCandidates: (string | null)[] = [];
  /** Encoded frames in arrival order (Annex-B for H.264, raw VP8 frames otherwise). */
  readonly frames: Buffer[] = [];
  codec: string | undefined;
  /** Keyframes among the received frames. */
  keyframes = 0;
  channel: RTCDataChannel | undefined;
  #videoSsrc: number | undefined;
  #depacketizer: DepacketizeBase | undefined;
  readonly channelOpen: Promise<RTCDataChannel>;
  #resolveChannel!: (channel: RTCDataChannel) => void;

  /** While set, the viewer's SCTP packets are lost on the way out: the input channel cannot come up. */
  #sctpLostUntil: Promise<void> | undefined;

  /** `sctpLostUntil`: lose every SCTP packet this viewer sends until it resolves (a lossy set-up). */
  constructor(url: string, options: { sctpLostUntil?: Promise<void> } = {}) {
    this.url = url;
    this.#sctpLostUntil = options.sctpLostUntil;
    void options.sctpLostUntil?.then(() => { this.#sctpLostUntil = undefined; });
    this.channelOpen = new Promise((resolve) => { this.#resolveChannel = resolve; });
    this.signaling = this.#connect();
  }

  #connect(): SignalingClient {
    const signaling = new SignalingClient(this.url);
    signaling.ws.on('message', (data: Buffer) => {
      const message = JSON.parse(data.toString()) as ServerMessage;
      if (message.type === 'offer') void this.#answer(message.sdp);
      if (message.type === 'candidate') {
        this.remoteCandidates.push(message.candidate?.candidate ?? null);
        const c = message.candidate;
        if (c) void this.pc?.addIceCandidate({ candidate: c.candidate, sdpMid: c.sdpMid ?? undefined, sdpMLineIndex: c.sdpMLineIndex ?? undefined }).catch(() => undefined);
      }
    });
    return signaling;
  }

  async hello(extra: Partial<Extract<ClientMessage, { type: 'hello' }>> = {}): Promise<Extract<ServerMessage, { type: 'config' }>> {
    await this.signaling.opened;
    this.signaling.send({ type: 'hello', protocol: 1, ...extra });
    this.config = await this.signaling.next('config');
    return this.config;
  }

  /** Drops the signaling socket without a bye (as a network failure would) and resumes with the token. */
  async resume(hasPeer = true): Promise<Extract<ServerMessage, { type: 'config' }>> {
    const token = this.config?.resumeToken;
    this.signaling.ws.terminate();
    await this.signaling.closed;
    this.signaling = this.#connect();
    return this.hello({ resumeToken: token, hasPeer });
  }

  async #answer(sdp: string): Promise<void> {
    await this.pc?.close();
    const pc = new RTCPeerConnection({ iceServers: [], iceUseIpv6: false, bundlePolicy: 'max-bundle', codecs: { video: [useH264(), useVP8()], audio: [] } });
    this.pc = pc;
    this.#depacketizer = undefined;
    pc.onIceCandidate.subscribe((candidate) => {
      if (pc !== this.pc) return;
      this.signaling.send({ type: 'candidate', candidate: candidate ? { candidate: candidate.candidate, sdpMid: candidate.sdpMid ?? null, sdpMLineIndex: candidate.sdpMLineIndex ?? null } : null });
    });
    pc.onDataChannel.subscribe((channel) => {
      this.channel = channel;
      if (channel.readyState === 'open') this.#resolveChannel(channel);
      channel.stateChanged.subscribe((state) => { if (state === 'open') this.#resolveChannel(channel); });
    });
    pc.onTrack.subscribe((track) => {
      track.onReceiveRtp.subscribe((rtp: RtpPacket) => {
        if (pc !== this.pc) return;
        this.#videoSsrc = rtp.header.ssrc;
        const mime = track.codec?.mimeType.toLowerCase() ?? '';
        if (!this.#depacketizer) {
          this.codec = mime;
          this.#depacketizer = new DepacketizeBase(mime === 'video/vp8' ? 'VP8' : 'MPEG4/ISO/AVC', { waitForKeyframe: true, isFinalPacketInSequence: (header) => header.marker });
        }
        for (const output of this.#depacketizer.processInput({ rtp })) {
          if (!output.frame) continue;
          this.frames.push(output.frame.data);
          if (output.frame.isKeyframe) this.keyframes++;
        }
      });
    });
    await pc.setRemoteDescription({ type: 'offer', sdp });
    this.#loseSctpWhileAsked(pc);
    const answer = await pc.createAnswer();
    await pc.setLocalDescription(answer);
    this.signaling.send({ type: 'answer', sdp: pc.localDescription?.sdp ?? answer.sdp });
  }

  #loseSctpWhileAsked(pc: RTCPeerConnection): void {
    // werift's association writes through its transport's `send`, looked up on every packet.
    const bridge = (pc.sctpTransport as unknown as { sctp: { transport: { send: (data: Buffer) => Promise<void> } } } | undefined)?.sctp.transport;
    if (!bridge) return;
    const send = bridge.send;
    bridge.send = (data) => (this.#sctpLostUntil ? Promise.resolve() : send(data));
  }

  /** Sends an RTCP picture loss indication, as a browser does when it cannot decode. */
  async sendPli(): Promise<void> {
    const receiver = this.pc?.getReceivers()[0];
    if (!receiver || this.#videoSsrc === undefined) throw new Error('no video receiver yet');
    await receiver.sendRtcpPLI(this.#videoSsrc);
  }

  async waitForFrames(count: number, timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.frames.length < count) {
      if (Date.now() > deadline) throw new Error(`received ${this.frames.length} frames, wanted ${count}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  async close(): Promise<void> {
    this.signaling.ws.terminate();
    await this.pc?.close();
  }
}

/** Decodes the received frames with ffmpeg and reads each picture's barcode from its luma plane. */
export async function decodeFrames(frames: Buffer[], codec: string, width: number, height: number): Promise<DecodedFrame[]> {
  const vp8 = codec === 'video/vp8';
  let input: Buffer;
  if (vp8) {
    // Minimal IVF: 32-byte file header, then a 12-byte header before each frame.
    const header = Buffer.alloc(32);
    header.write('DKIF', 0, 'latin1');
    header.writeUInt16LE(32, 6);
    header.write('VP80', 8, 'latin1');
    header.writeUInt16LE(width, 12);
    header.writeUInt16LE(height, 14);
    header.writeUInt32LE(60, 16);
    header.writeUInt32LE(1, 20);
    header.writeUInt32LE(frames.length, 24);
    input = Buffer.concat([header, ...frames.flatMap((frame, i) => {
      const h = Buffer.alloc(12);
      h.writeUInt32LE(frame.length, 0);
      h.writeBigUInt64LE(BigInt(i), 4);
      return [h, frame];
    })]);
  } else {
    input = Buffer.concat(frames);
  }
  const child = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-f', vp8 ? 'ivf' : 'h264', '-i', 'pipe:0',
    '-f', 'rawvideo', '-pix_fmt', 'gray', '-fps_mode', 'passthrough', 'pipe:1'], { stdio: ['pipe', 'pipe', 'pipe'] });
  const chunks: Buffer[] = [];
  child.stdout.on('data', (c: Buffer) => chunks.push(c));
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString(); });
  child.stdin.on('error', () => undefined);
  child.stdin.end(input);
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`ffmpeg could not decode the stream: ${stderr.slice(-300)}`);
  const raw = Buffer.concat(chunks);
  const frameBytes = width * height;
  const layout = barcodeLayout(width);
  const samples = new Uint8Array(64);
  const decoded: DecodedFrame[] = [];
  for (let offset = 0; offset + frameBytes <= raw.length; offset += frameBytes) {
    for (let i = 0; i < 64; i++) {
      const x = (i % 32) * layout.cellWidth + (layout.cellWidth >> 1);
      const y = Math.floor(i / 32) * layout.cellHeight + (layout.cellHeight >> 1);
      samples[i] = raw[offset + y * width + x];
    }
    const result = decodeBarcode(samples);
    decoded.push(result ?? { frameNumber: -1, inputSeq: -1 });
  }
  return decoded;
}

/**
 * A generous bound for a wait, stretched by how overloaded this machine is now (two cores shared with a
 * whole test run): never a speed assertion, only how long to wait before calling something stuck.
 */
export function stretchedByLoad(ms: number): number {
  return Math.round(ms * Math.max(1, loadavg()[0] / availableParallelism()));
}
