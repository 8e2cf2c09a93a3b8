// Screen-capture micro-benchmark of the x11 source: how long after a screen change a frame showing it is
// complete in the streaming app's process, and what capturing costs in CPU, for ffmpeg's x11grab (the
// peer, as the app used it before, and with frame threading off) and the app's own damage-driven capture
// (MIT-SHM, and core GetImage as on a display without MIT-SHM), side by side on one Xvfb, in rounds.
// Less sensitive to machine load than the end-to-end bench (no browser, no encoder, no WebRTC).
//
//   flock /tmp/svc-bench.lock node bench/stream/capture.ts [--rounds 3] [--changes 40] [--fps 60]
//
// A change: a second X client fills a 100x100 square (a typed word, say), or the whole screen (a game's
// frame), white or black alternately, 60-120 ms apart; the clock starts just before the fill request is
// written. A frame "shows" it when the square's centre pixel has the new colour. CPU: capture process
// (ffmpeg, or this process for ours) + Xvfb, as % of one core, while changing and while the screen is
// still (2 s).
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import x11, { type XClient, type XDisplay } from 'x11';
import { ScreenCapture, type FrameSink } from '../../streaming-app/src/x11-capture.ts';
import { startXvfb, XConnection } from '../../streaming-app/src/x11-display.ts';
import { median, percentile, printTable } from '../lib/report.ts';

const { values: args } = parseArgs({
  options: { rounds: { type: 'string', default: '3' }, changes: { type: 'string', default: '40' }, fps: { type: 'string', default: '60' } },
});
const ROUNDS = Number(args.rounds);
const CHANGES = Number(args.changes);
const FPS = Number(args.fps);
const [W, H] = [1280, 720];
const PROBE = { x: 670, y: 320 }; // inside the square, clear of the cursor at the centre
const AREAS = { 'a 100x100 square': [600, 300, 100, 100], 'the whole screen': [0, 0, W, H] };
type Area = keyof typeof AREAS;

/** A capture under test: started on the display, it calls `onFrame` with each complete frame. */
type Method = {
  name: string;
  start(display: string, onFrame: (isWhite: boolean) => void): Promise<{ pids: number[]; stop(): Promise<void> }>;
};

function x11grab(name: string, extra: string[]): Method {
  return {
    name,
    async start(display, onFrame) {
      const ffmpeg = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-nostdin', '-f', 'x11grab', '-framerate', String(FPS),
        '-video_size', `${W}x${H}`, '-draw_mouse', '1', '-i', `${display}+0,0`, '-pix_fmt', 'yuv420p', '-fps_mode', 'passthrough',
        '-enc_time_base', '1:1000000', ...extra, '-f', 'rawvideo', '-flush_packets', '1', 'pipe:1'], { stdio: ['ignore', 'pipe', 'inherit'] });
      const frameBytes = W * H * 1.5;
      const probe = PROBE.y * W + PROBE.x; // in the Y plane
      let filled = 0;
      let luma = 0;
      ffmpeg.stdout.on('data', (chunk: Buffer) => {
        for (let offset = 0; offset < chunk.length;) {
          const take = Math.min(frameBytes - filled, chunk.length - offset);
          if (probe >= filled && probe < filled + take) luma = chunk[offset + probe - filled];
          filled += take;
          offset += take;
          if (filled === frameBytes) {
            filled = 0;
            onFrame(luma > 128);
          }
        }
      });
      return { pids: [process.pid, ffmpeg.pid ?? 0], stop: () => stopProcess(ffmpeg) };
    },
  };
}

function damageCapture(name: string, useShm: boolean): Method {
  return {
    name,
    async start(display, onFrame) {
      const x = await XConnection.open(display);
      const frameBytes = W * H * 1.5;
      const free: Buffer[] = [Buffer.alloc(frameBytes), Buffer.alloc(frameBytes)];
      const sink: FrameSink = {
        frameBytes, wanted: true, inputSeq: 0,
        acquire: () => free.pop(),
        deliver(buffer) {
          onFrame(buffer[PROBE.y * W + PROBE.x] > 128); // luma
          free.push(buffer);
          return true;
        },
      };
      const capture = await ScreenCapture.create(useShm ? x : Object.assign(Object.create(x) as XConnection, { shm: undefined }), sink, {
        width: W, height: H, fps: FPS, inputSeq: () => 0, onFailure: (reason) => { throw new Error(reason); },
      });
      if (capture.method !== (useShm ? 'shm' : 'core')) throw new Error(`expected ${useShm ? 'shm' : 'core'} capture, got ${capture.method}`);
      capture.start();
      return { pids: [process.pid], stop: async () => { capture.close(); x.close(); } };
    },
  };
}

const METHODS: Method[] = [
  x11grab('x11grab (as before: frame-threaded rawvideo output)', []),
  x11grab('x11grab -threads 1', ['-threads', '1']),
  damageCapture('damage + MIT-SHM GetImage (the app now)', true),
  damageCapture('damage + core GetImage (no MIT-SHM)', false),
];

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
}

function cpuSeconds(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch { /* exited */ }
  }
  return ticks / 100;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const call = <T>(request: (callback: (error: Error | null, value: T) => void) => void): Promise<T> =>
  new Promise((resolve, reject) => request((error, value) => (error ? reject(error) : resolve(value))));

type Result = { latencies: number[]; missed: number; frames: number; busyCpu: number; stillCpu: number };

async function measure(method: Method, area: Area, display: string, xvfbPid: number, painter: XClient, root: number, gc: number): Promise<Result> {
  let want: { white: boolean; at: number; seen: () => void } | undefined;
  let frames = 0;
  const latencies: number[] = [];
  const capture = await method.start(display, (white) => {
    frames++;
    if (want && white === want.white) {
      latencies.push(performance.now() - want.at);
      want.seen();
      want = undefined;
    }
  });
  const fill = (white: boolean): void => {
    painter.ChangeGC(gc, { foreground: white ? 0xffffff : 0 });
    painter.PolyFillRectangle(root, gc, AREAS[area]);
  };
  try {
    fill(false);
    await sleep(1000);
    const pids = [...capture.pids, xvfbPid];
    let cpu = cpuSeconds(pids);
    let since = performance.now();
    let missed = 0;
    for (let i = 0; i < CHANGES; i++) {
      await sleep(60 + Math.random() * 60);
      const white = i % 2 === 0;
      const seen = new Promise<boolean>((resolve) => { want = { white, at: performance.now(), seen: () => resolve(true) }; });
      fill(white);
      if (!await Promise.race([seen, sleep(1000).then(() => false)])) missed++;
      want = undefined;
    }
    const busyCpu = (cpuSeconds(pids) - cpu) / ((performance.now() - since) / 1000) * 100;
    cpu = cpuSeconds(pids);
    since = performance.now();
    await sleep(2000);
    const stillCpu = (cpuSeconds(pids) - cpu) / ((performance.now() - since) / 1000) * 100;
    return { latencies, missed, frames, busyCpu, stillCpu };
  } finally {
    await capture.stop();
  }
}

const xvfb = await startXvfb('Xvfb', W, H);
const painterDisplay = await call<XDisplay>((cb) => x11.createClient({ display: xvfb.display }, cb));
const painter = painterDisplay.client;
painter.on('error', () => { /* Xvfb stopping at the end */ });
const root = painterDisplay.screen[0].root;
const gc = painter.AllocID();
painter.CreateGC(gc, root, { foreground: 0 });
const keyOf = (area: Area, method: Method): string => `${area}\t${method.name}`;
const results = new Map<string, Result[]>();
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const area of Object.keys(AREAS) as Area[]) {
      for (const method of METHODS) {
        const result = await measure(method, area, xvfb.display, xvfb.child.pid ?? 0, painter, root, gc);
        results.set(keyOf(area, method), [...(results.get(keyOf(area, method)) ?? []), result]);
      }
    }
    process.stderr.write(`round ${round + 1} of ${ROUNDS} done\n`);
  }
} finally {
  painter.terminate();
  await xvfb.stop();
}

const sorted = (values: number[]): number[] => [...values].sort((a, b) => a - b);
for (const area of Object.keys(AREAS) as Area[]) {
  const rows = METHODS.map((method) => {
    const runs = results.get(keyOf(area, method)) ?? [];
    const all = runs.flatMap((r) => r.latencies);
    return [method.name, String(all.length), percentile(sorted(all), 50), percentile(sorted(all), 95), String(runs.reduce((n, r) => n + r.missed, 0)),
      median(runs.map((r) => r.busyCpu)), median(runs.map((r) => r.stillCpu))];
  });
  printTable(`Screen change (${area}) -> frame complete in the app as I420, ms (${W}x${H}, ${FPS} fps, ${ROUNDS} rounds of ${CHANGES} changes)`,
    ['capture', 'samples', 'p50', 'p95', 'missed', 'cpu % changing', 'cpu % still'], rows);
}
console.log('\ncpu: the capture process (ffmpeg, or this process for the in-process capture) + Xvfb, % of one core, median of rounds.');
