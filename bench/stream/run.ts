// Streaming benchmark: session setup and input-to-photon latency of the reference streaming app, measured
// in headless Chromium with the real browser client, at 1280x720, 60 fps, software encoder (libx264), for
// two frame sources side by side in one run: the built-in test scene and an X11 application (xterm on
// Xvfb, captured on change with DAMAGE and MIT-SHM, input injected with XTEST). bench/stream/capture.ts
// takes the capture alone apart, side by side with ffmpeg x11grab.
//
//   flock /tmp/svc-bench.lock node bench/stream/run.ts [--runs 3] [--sessions 30] [--x11-sessions 10] [--inputs 40]
//     [--people 5] [--arrival-runs 1] [--flashes 30] [--only latency|people|lip-sync]
//
// Setup: new WebSocket -> first decoded frame shown (requestVideoFrameCallback expectedDisplayTime);
// "from load" adds the time from navigation start to the new WebSocket. Every sample is a fresh container
// process, as in production (one session per container); each run starts with one unrecorded warm-up.
// Input-to-photon, one session per source and run, the first 2 s discarded, inputs at irregular 90-150 ms:
//   scene: pointer event sent -> first shown frame whose barcode carries it (the scene renders on input).
//   x11:   key event sent (x, then Backspace, alternately) -> first shown frame in which xterm's text line
//          differs from the frame before the key: the app's real reaction, read from the pixels.
//   Both read the frame through WebCodecs (new VideoFrame(video)) and time it by the callback of that frame:
//   the element's current frame is often a frame newer than the one a callback describes.
//   "photon" is the frame's expectedDisplayTime; "present" its presentationTime (handed to the compositor).
//   Chrome estimates expectedDisplayTime from the stream's timing, which a sparse stream (x11 sends frames
//   only on change) throws off by tens of ms either way; presentationTime is measured.
// CPU: user+system time of the container and every process it started (encoder, capture, Xvfb, the app)
// over the input session, as % of one core.
// Floor: one frame interval + the app's measured encode time (median, from the app's own statistics).
// People (people.ts, through Chromium → proxy → platform → container): the next person after a tab close
// (from the close to the instance granted, target ≤ 2 s, and to the first frame, target ≤ 5 s), and ten
// arrivals at a two-instance function with spare 1 (from Start to the first frame, each).
// Lip-sync (lip-sync.ts): an X11 app flashes its screen white and starts a tone together; in Chromium, the
// sound as played out minus the picture as presented, with the default (the picture at once) and with
// STREAMING_LIP_SYNC=true (the browser and the page hold the picture back to match the sound). No peer runs here:
// selkies-gstreamer would be the one (GStreamer's webrtcbin, Python), and neither is installed.
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { CHROMIUM_ARGS, descendants, startApp, which, type AppProcess } from '../../streaming-app/test/helpers.ts';
import { percentile, printTable } from '../lib/report.ts';
import { lipSyncSession } from './lip-sync.ts';
import { nextPersonAfterTabClose, tenArrivals } from './people.ts';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    sessions: { type: 'string', default: '30' },
    'x11-sessions': { type: 'string', default: '10' },
    inputs: { type: 'string', default: '40' },
    people: { type: 'string', default: '5' },
    'arrival-runs': { type: 'string', default: '1' },
    flashes: { type: 'string', default: '30' },
    only: { type: 'string' },
  },
});
const RUNS = Number(args.runs);
const INPUTS = Number(args.inputs);
const FPS = 60;
const FRAME_INTERVAL_MS = 1000 / FPS;
const TARGET_SETUP_P50_MS = 400;
const TARGET_INPUT_P50_MS = 40;
const TARGET_X11_INPUT_P50_MS = 50;
const TARGET_X11_RATIO = 1.5;
const TARGET_X11_FIRST_FRAME_MS = 1000;
const COMMON_ENV = {
  STREAMING_VIDEO_SIZE: '1280x720', STREAMING_VIDEO_FPS: String(FPS), STREAMING_ENCODER: 'libx264',
  STREAMING_VIDEO_BITRATE_KBPS: '6000', STREAMING_EXIT_DELAY_MS: '0', LOG_LEVEL: 'info', STREAMING_AUDIO: 'false',
};

type Snapshot = {
  framesPresented: number;
  framesDecodedFromBarcode: number;
  setupMs?: number;
  inputToPhotonMs: number[];
  inputToPresentMs: number[];
  timeline: Record<string, number>;
  metrics: { fps?: number; appEncodeMs?: number };
};

type Latencies = { photon: number[]; present: number[] };

type Source = {
  name: 'scene' | 'x11';
  sessions: number;
  env: Record<string, string>;
  /**
   * Sends INPUTS events in the page and returns their latencies to the frame's expected display time
   * (photon) and to its hand-over to the compositor (present).
   */
  measureInputs(page: Page): Promise<Latencies>;
};

const SCENE: Source = {
  name: 'scene',
  sessions: Number(args.sessions),
  env: { ...COMMON_ENV, STREAMING_SOURCE: 'scene' },
  async measureInputs(page) {
    const before = await snapshot(page);
    // Irregular spacing, generated in the page so the send timestamps do not include CDP latency.
    await page.evaluate(`(async () => {
      for (let i = 0; i < ${INPUTS}; i++) {
        await new Promise((r) => setTimeout(r, 90 + Math.random() * 60));
        svcStream.sendPointer(Math.random(), Math.random());
      }
      await new Promise((r) => setTimeout(r, 300));
    })()`);
    const after = await snapshot(page);
    return { photon: after.inputToPhotonMs.slice(before.inputToPhotonMs.length), present: after.inputToPresentMs.slice(before.inputToPresentMs.length) };
  },
};

const X11: Source = {
  name: 'x11',
  sessions: Number(args['x11-sessions']),
  env: { ...COMMON_ENV, STREAMING_SOURCE: 'x11', STREAMING_APP_COMMAND: 'exec xterm -geometry 98x26+0+0 -fa Monospace -fs 16 -e cat' },
  measureInputs: (page) => page.evaluate(`(async () => {
    const video = document.querySelector('video');
    // xterm's first text line: where the typed character appears and disappears.
    const W = 640, H = 40;
    const canvas = document.createElement('canvas');
    canvas.width = W;
    canvas.height = H;
    const ctx = canvas.getContext('2d', { willReadFrequently: true });
    const grab = (source = video) => { ctx.drawImage(source, 0, 0, W, H, 0, 0, W, H); return ctx.getImageData(0, 0, W, H).data; };
    const differs = (a, b) => { for (let i = 0; i < a.length; i += 4) if (Math.abs(a[i] - b[i]) > 80) return true; return false; };
    const latencies = { photon: [], present: [] };
    for (let i = 0; i < ${INPUTS}; i++) {
      await new Promise((r) => setTimeout(r, 90 + Math.random() * 60));
      const before = grab();
      const [code, key] = i % 2 === 0 ? ['KeyX', 'x'] : ['Backspace', 'Backspace'];
      const sentAt = performance.now();
      svcStream.sendKeyCode(code, key, true, 0);
      svcStream.sendKeyCode(code, key, false, 0);
      // The video's current frame may already be newer than the one a callback describes (frames come
      // close together): the change is dated by its frame's own timestamp, and timed by the callback of
      // that frame (or the first one after it).
      let changed;
      const shownAt = await new Promise((resolve) => {
        const step = (_now, meta) => {
          const frame = new VideoFrame(video);
          if (changed === undefined && differs(grab(frame), before)) changed = frame.timestamp;
          frame.close();
          if (changed !== undefined && meta.mediaTime * 1e6 + 1 >= changed) resolve(meta);
          else if (performance.now() - sentAt > 1000) resolve(undefined);
          else video.requestVideoFrameCallback(step);
        };
        video.requestVideoFrameCallback(step);
      });
      if (shownAt === undefined) continue;
      latencies.photon.push(shownAt.expectedDisplayTime - sentAt);
      latencies.present.push(shownAt.presentationTime - sentAt);
    }
    return latencies;
  })()`) as Promise<Latencies>,
};

const sorted = (values: number[]): number[] => [...values].sort((a, b) => a - b);
const p = (values: number[], q: number): number => percentile(sorted(values), q);
const snapshot = (page: Page): Promise<Snapshot> => page.evaluate('svcStream.snapshot()') as Promise<Snapshot>;

async function poll<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function openClient(context: BrowserContext, app: AppProcess): Promise<Page> {
  const page = await context.newPage();
  await page.goto(`http://127.0.0.1:${app.streamingPort}/client/?autostart=1&signal=${encodeURIComponent(app.signalingUrl())}`);
  return page;
}

/** CPU seconds used so far by a process and all its descendants. */
function cpuSeconds(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch { /* exited */ }
  }
  return ticks / 100;
}

async function endSession(app: AppProcess, page: Page): Promise<void> {
  await page.evaluate('svcStream.bye("bench")');
  await app.exited;
  await page.close();
}

/** One fresh container, one browser session: setup time, from the new WebSocket and from page load. */
async function setupSample(context: BrowserContext, source: Source): Promise<{ setupMs: number; fromLoadMs: number; timeline: Record<string, number> }> {
  const app = await startApp(source.env);
  try {
    const page = await openClient(context, app);
    const s = await poll('the first frame', () => snapshot(page), (x) => x.setupMs !== undefined && x.framesPresented > 0);
    const connectAt = await page.evaluate('svcStream.client.timeline.connect') as number;
    await endSession(app, page);
    return { setupMs: s.setupMs ?? NaN, fromLoadMs: connectAt + (s.setupMs ?? NaN), timeline: s.timeline };
  } finally {
    await app.stop();
  }
}

/** One session: wait 2 s, then send inputs and collect their latencies and the CPU the container used. */
async function inputSession(context: BrowserContext, source: Source): Promise<Latencies & { encodeMs: number; fps: number; cpuPercent: number }> {
  const app = await startApp(source.env);
  try {
    const page = await openClient(context, app);
    await poll('the first frame', () => snapshot(page), (x) => x.framesPresented > 0);
    await new Promise((r) => setTimeout(r, 2000)); // discarded warm-up
    const pids = [app.pid, ...descendants(app.pid)];
    const cpuBefore = cpuSeconds(pids);
    const startedAt = performance.now();
    const latencies = await source.measureInputs(page);
    const cpuPercent = ((cpuSeconds(pids) - cpuBefore) / ((performance.now() - startedAt) / 1000)) * 100;
    const after = await poll('app statistics', () => snapshot(page), (x) => x.metrics.appEncodeMs !== undefined);
    await endSession(app, page);
    return { ...latencies, encodeMs: after.metrics.appEncodeMs ?? NaN, fps: after.metrics.fps ?? NaN, cpuPercent };
  } finally {
    await app.stop();
  }
}

const only = (part: string): boolean => args.only === undefined || args.only === part;
if (only('latency')) await latencyRuns();
if (only('people')) await peopleRuns();
if (only('lip-sync')) await lipSyncRuns();

async function latencyRuns() {
  const profile = await mkdtemp(join(tmpdir(), 'svc-bench-chromium-'));
  const context = await chromium.launchPersistentContext(profile, { executablePath: '/usr/bin/chromium', args: CHROMIUM_ARGS, headless: true });
  type Totals = { setup: number[]; fromLoad: number[]; photon: number[]; present: number[]; encode: number[]; cpu: number[] };
  const totals: Record<Source['name'], Totals> = {
    scene: { setup: [], fromLoad: [], photon: [], present: [], encode: [], cpu: [] },
    x11: { setup: [], fromLoad: [], photon: [], present: [], encode: [], cpu: [] },
  };
  const rows: (string | number)[][] = [];
  const breakdownRows: (string | number)[][] = [];
  const verdict = (ok: boolean): string => (ok ? 'met' : 'MISSED');
  try {
    for (let run = 1; run <= RUNS; run++) {
      for (const source of [SCENE, X11]) {
        await setupSample(context, source); // warm-up, not recorded
        const setups: Awaited<ReturnType<typeof setupSample>>[] = [];
        for (let i = 0; i < source.sessions; i++) setups.push(await setupSample(context, source));
        const input = await inputSession(context, source);
        const t = totals[source.name];
        const setupMs = setups.map((s) => s.setupMs);
        t.setup.push(...setupMs);
        t.fromLoad.push(...setups.map((s) => s.fromLoadMs));
        t.photon.push(...input.photon);
        t.present.push(...input.present);
        t.encode.push(input.encodeMs);
        t.cpu.push(input.cpuPercent);
        const floor = FRAME_INTERVAL_MS + input.encodeMs;
        rows.push([`run ${run} ${source.name} setup`, String(setupMs.length), p(setupMs, 50), p(setupMs, 95), floor, p(setupMs, 50) / floor]);
        rows.push([`run ${run} ${source.name} input-to-photon`, String(input.photon.length), p(input.photon, 50), p(input.photon, 95), floor, p(input.photon, 50) / floor]);
        rows.push([`run ${run} ${source.name} input-to-present`, String(input.present.length), p(input.present, 50), p(input.present, 95), floor, p(input.present, 50) / floor]);
        const milestone = (key: string) => p(setups.map((s) => s.timeline[key] ?? NaN).filter(Number.isFinite), 50);
        breakdownRows.push([`run ${run} ${source.name}`, milestone('open'), milestone('offer'), milestone('answer'), milestone('peer-connected'),
          p(setupMs, 50), p(setups.map((s) => s.fromLoadMs), 50), p(input.photon, 50), input.encodeMs, input.fps, input.cpuPercent]);
      }
    }
  } finally {
    await context.close();
    await rm(profile, { recursive: true, force: true });
  }

  const scene = totals.scene;
  const x11 = totals.x11;
  const sceneP50 = p(scene.photon, 50);
  const x11P50 = p(x11.photon, 50);
  printTable(`Streaming latency per run, ms (1280x720, ${FPS} fps, libx264 ultrafast/zerolatency, headless Chromium, loopback)`,
    ['measure', 'samples', 'p50', 'p95', 'floor', 'p50/floor'], rows);
  printTable('All runs against the targets, ms',
    ['measure', 'samples', 'p50', 'p95', 'target', 'verdict'], [
      ['scene setup (from WebSocket)', String(scene.setup.length), p(scene.setup, 50), p(scene.setup, 95), `p50 <= ${TARGET_SETUP_P50_MS}`, verdict(p(scene.setup, 50) <= TARGET_SETUP_P50_MS)],
      ['scene input-to-photon', String(scene.photon.length), sceneP50, p(scene.photon, 95), `p50 <= ${TARGET_INPUT_P50_MS}`, verdict(sceneP50 <= TARGET_INPUT_P50_MS)],
      ['x11 first frame from page load', String(x11.fromLoad.length), p(x11.fromLoad, 50), p(x11.fromLoad, 95), `p50 <= ${TARGET_X11_FIRST_FRAME_MS}`, verdict(p(x11.fromLoad, 50) <= TARGET_X11_FIRST_FRAME_MS)],
      ['x11 input-to-photon', String(x11.photon.length), x11P50, p(x11.photon, 95), `p50 <= ${TARGET_X11_INPUT_P50_MS}`, verdict(x11P50 <= TARGET_X11_INPUT_P50_MS)],
      ['x11 / scene input-to-photon p50', '-', x11P50 / sceneP50, '-', `<= ${TARGET_X11_RATIO}`, verdict(x11P50 / sceneP50 <= TARGET_X11_RATIO)],
      ['scene input-to-present (information)', String(scene.present.length), p(scene.present, 50), p(scene.present, 95), '-', '-'],
      ['x11 input-to-present (information)', String(x11.present.length), p(x11.present, 50), p(x11.present, 95), '-', '-'],
    ]);
  printTable('Where the time goes, medians in ms (setup milestones from new WebSocket), and CPU per stream',
    ['run', 'ws open', 'offer', 'answer', 'dtls conn', 'first frame', 'from load', 'in->photon', 'encode', 'fps', 'cpu % core'], breakdownRows);
  printTable('CPU per stream during input, % of one core (container + encoder + capture + Xvfb + app)',
    ['source', 'runs', 'median', 'max'], [
      ['scene', String(scene.cpu.length), p(scene.cpu, 50), Math.max(...scene.cpu)],
      ['x11', String(x11.cpu.length), p(x11.cpu, 50), Math.max(...x11.cpu)],
    ]);
  console.log(`\nfloor = one frame interval (${FRAME_INTERVAL_MS.toFixed(2)} ms) + the app's median encode time (frame into ffmpeg -> last encoded byte out).`);
}

async function peopleRuns() {
  const next = await nextPersonAfterTabClose(Number(args.people));
  const arrivals = await tenArrivals(Number(args['arrival-runs']));
  const row = (what: string, values: number[], target?: number) => [what, String(values.length), p(values, 50), p(values, 95),
    target === undefined ? '(information)' : `<= ${target}`, target === undefined ? '' : p(values, 50) <= target ? 'met' : 'MISSED'];
  printTable('People arriving and leaving, ms (1280x720, Chromium -> proxy -> platform -> container, loopback)',
    ['measure', 'samples', 'p50', 'p95', 'target p50', 'verdict'], [
      row('next person after a tab close: instance granted', next.grantMs, 2000),
      row('next person after a tab close: first frame', next.frameMs, 5000),
      row('ten arrivals (2 instances, spare 1): first frame', arrivals.firstFrameMs),
    ]);
  const step = (key: keyof (typeof next.steps)[number]) => p(next.steps.map((milestone) => milestone[key] ?? NaN).filter(Number.isFinite), 50);
  printTable('Next person after a tab close, where the time goes (the platform\'s log)',
    ['ms after the close', 'session ended', 'new process started', 'RUNNING (first healthy check)', 'granted', 'first frame'],
    [['p50', step('ended'), step('processStarted'), step('running'), p(next.grantMs, 50), p(next.frameMs, 50)]]);
  console.log(`\nThe instance a closed tab frees is a fresh container (one session per container), so "granted" includes starting it.
Ten arrivals: each streams 2 s, then closes its tab; at most two stream at once, so the later ones wait for
earlier sessions and replacements (the figure is mostly the line). Granted first come, first served: ${arrivals.inOrder ? 'yes' : 'NO'}.`);
}

async function lipSyncRuns() {
  const missing = ['Xvfb', 'pulseaudio', 'pacat', 'parec'].filter((tool) => !which(tool));
  if (missing.length) throw new Error(`the lip-sync rows need ${missing.join(', ')} (Debian packages xvfb pulseaudio pulseaudio-utils)`);
  const load = (): string => loadavg().map((value) => value.toFixed(1)).join(' ');
  const loadBefore = load();
  const flashes = Number(args.flashes);
  const rows: (string | number)[][] = [];
  for (const [mode, lipSync] of [['default (picture at once)', 'false'], ['STREAMING_LIP_SYNC=true', 'true']]) {
    const session = await lipSyncSession({ ...COMMON_ENV, STREAMING_LIP_SYNC: lipSync }, flashes);
    const later = session.offsets.slice(Math.floor(session.offsets.length / 2));
    rows.push([mode, String(session.offsets.length), p(session.offsets, 50), p(session.offsets, 95), p(later, 50),
      session.audioJitterBufferMs, session.videoJitterBufferMs, p(session.appSkew, 50), `<= ${FRAME_INTERVAL_MS.toFixed(1)}`,
      Math.abs(p(session.offsets, 50)) <= FRAME_INTERVAL_MS ? 'met' : 'MISSED']);
  }
  printTable(`Lip-sync: sound played out minus picture presented, ms (1280x720, ${FPS} fps, libx264, an X11 app, headless Chromium; one session each of ${flashes} flashes)`,
    ['mode', 'samples', 'p50', 'p95', 'p50 2nd half', 'audio jb', 'video jb', 'app skew', 'target |p50|', 'verdict'], rows);
  console.log(`\npositive: the sound comes late. "2nd half": the later half of the session (lip-sync converges over the
first seconds). jb: the browser's mean jitter-buffer delay per track (for video, what lip-sync costs the picture).
app skew: the app's own tone start after its flash, already taken out. Load average before / after: ${loadBefore} / ${load()}.`);
}
