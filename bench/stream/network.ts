// Streaming over an emulated network, svc side by side with Chromium's own WebRTC (libwebrtc): the same
// receiver (headless Chromium inside a network namespace, behind a veth whose host end has a tbf
// bottleneck: streaming-app/test/shaped-link.ts), the same picture (640x360, 30 fps by default, testsrc2-like
// pattern with fresh noise in every frame), H.264, a 6 Mbit/s ceiling, one profile after the other.
//
//   svc:       the reference streaming app, pipe source fed by input-renderer.ts (ffmpeg's lavfi testsrc2 +
//              noise, with the newest input the renderer read from the app drawn into each frame).
//   libwebrtc: a second Chromium in the host namespace sends canvas.captureStream() of a canvas drawn with
//              the same kind of picture (moving bars + noise), H.264 preferred, maxBitrate 6 Mbit/s,
//              the same receiver hints (playoutDelayHint / jitterBufferTarget 0).
//
//   flock /tmp/svc-bench.lock node bench/stream/network.ts [--seconds 30] [--only clean,rtt60,rtt40loss1,loss5,loss10,rtt100loss5,3mbit,drop,drop05]
//     [--degradation balanced,maintain-framerate,maintain-resolution,disabled] [--fec true,false] [--audio] [--app-logs DIR] [--trace DIR] [--size 1280x720 --fps 60]
//
// Profiles: clean (20 Mbit/s), rtt60 (RTT 60 ms, ± 5 ms jitter each way), rtt40loss1 (RTT 40 ms, 1 % loss
// each way), loss5 (5 % loss each way), loss10 (10 % loss each way), rtt100loss5 (RTT 100 ms, 5 % loss
// each way), 3mbit (a 3 Mbit/s bottleneck), drop (20 Mbit/s, then 2 Mbit/s
// for 15 s, then 20 again), drop05 (the same with 0.5 Mbit/s, too little for the full picture: svc steps
// its size or frame rate down by STREAMING_DEGRADATION, one svc row per preference given; likewise a row
// per STREAMING_VIDEO_FEC value given with --fec, svc's video FEC on a lossy link or never). Delay, jitter
// and loss come from the userspace link emulator in the link's router namespace (this kernel has no
// netem), with the same seed for both peers: they lose the same packets by number. Per profile and peer,
// from the receiver's inbound-rtp counters sampled every 500 ms: presented fps, freezes and frozen seconds
// (Chrome's freeze definition), keyframes, PLIs, NACKs, packets lost, mean received bitrate, the smallest
// frame size received, the jitter buffer's mean delay in the first and last third (delay growth),
// the time to the first frame (presented; from the client's new WebSocket for svc, from the sender's
// offer for libwebrtc), and for the drop: fps during it and the time after the link returns until
// the received rate is back at 90 % of what it was before.
// Input-to-photon, as bench/stream/run.ts measures it: from 2 s on, the receiving page sends an input
// every 90-150 ms over a DataChannel on the same link; the sender's picture carries the newest input it
// has read in the frame barcode (streaming-app/client/barcode.ts: svc's application, input-renderer.ts, reads
// it from the app's frame socket and draws it into its next frame; the libwebrtc sender page draws it on its
// canvas with the same code), and the receiver
// reads it from each presented frame: input sent → the expected display time of the first frame that
// shows it (the client's FrameMeter for svc, the same rule in the page for libwebrtc).
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, startApp, TONE, type AppProcess } from '../../streaming-app/test/helpers.ts';
import { NO_IMPAIRMENT, ShapedLink, shapedLinkUnavailable, symmetric, type Impairment } from '../../streaming-app/test/shaped-link.ts';
import { percentile, printTable } from '../lib/report.ts';
import { BARCODE_CELLS, BARCODE_ROWS, barcodeChecksum, barcodeLayout, decodeBarcode, encodeBarcode, LUMA_ONE, LUMA_ZERO } from '../../streaming-app/client/barcode.ts';
import { FrameTiming } from '../../streaming-app/client/frame-timing.ts';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '30' }, only: { type: 'string' }, degradation: { type: 'string', default: 'balanced' }, fec: { type: 'string', default: 'true' },
    audio: { type: 'boolean', default: false }, 'app-logs': { type: 'string' }, size: { type: 'string', default: '640x360' },
    fps: { type: 'string', default: '30' }, trace: { type: 'string' }, help: { type: 'boolean' },
  },
});
if (args.help) {
  console.log(`node bench/stream/network.ts [--seconds 30] [--only clean,rtt60,rtt40loss1,loss5,loss10,rtt100loss5,3mbit,drop,drop05] [--degradation balanced] [--fec true,false]
  svc and a Chromium→Chromium libwebrtc pair over the emulated link, one table per profile (needs root, iproute2, socat, chromium, ffmpeg).
  --seconds      length of each single-phase profile (the drop profiles are 10 + 15 + 15 s)
  --only         a comma-separated subset of the profiles
  --degradation  svc's STREAMING_DEGRADATION, comma-separated for a row each (balanced, maintain-framerate, maintain-resolution, disabled)
  --fec          svc's STREAMING_VIDEO_FEC, comma-separated for a row each (true: FEC while the link is lossy; false: never)
  --audio        svc's app also plays a tone (needs pulseaudio): its Opus losses, concealment and mode changes under each table
  --app-logs DIR svc's app logs at debug level (the estimator's every rate decision), one JSON-lines file per row in DIR
  --size WxH     the picture both send (default 640x360); --fps its frame rate (default 30)
  --trace DIR    per peer and profile, each of Chrome's freezes and each gap of 150 ms or more between presented frames,
                 with what the sender (svc's debug log) and the receiving Chromium (its WebRTC log) said around it, in DIR`);
  process.exit(0);
}
const SECONDS = Number(args.seconds);
const [WIDTH, HEIGHT] = args.size.split('x').map(Number);
const FPS = Number(args.fps);
if (!(WIDTH > 0 && HEIGHT > 0 && WIDTH % 2 === 0 && HEIGHT % 2 === 0 && FPS > 0)) {
  console.error(`bench/stream/network.ts: --size wants an even WxH (e.g. 1280x720) and --fps a positive number: ${args.size} @ ${args.fps}`);
  process.exit(2);
}
const MAX_KBPS = 6000;
/** svc's application: ffmpeg's pictures with the newest input it read drawn in (the renderer stamps the barcode). */
const INPUT_RENDERER = fileURLToPath(new URL('./input-renderer.ts', import.meta.url));
for (const dir of [args.trace, args['app-logs']]) if (dir) await mkdir(dir, { recursive: true });
const DEGRADATIONS = args.degradation.split(',');
const FECS = args.fec.split(',');
if (!FECS.every((f) => f === 'true' || f === 'false')) {
  console.error(`bench/stream/network.ts: --fec wants true, false or both: ${args.fec}`);
  process.exit(2);
}

type Phase = { seconds: number; rateKbit: number };
type Profile = { name: string; phases: Phase[]; impairment?: { down: Impairment; up: Impairment }; about?: string };
/**
 * Page script (--trace): every gap of GAP_MS or more between two presented frames, in wall-clock ms (the
 * app's log and Chromium's use the same clock), with the RTP timestamps on either side.
 */
const GAP_MS = 150;
const RECORD_GAPS = `(() => {
  window.gaps = [];
  const watch = (video) => {
    let last;
    const step = (now, meta) => {
      const at = performance.timeOrigin + now;
      const wall = (t) => (t === undefined ? undefined : Math.round(performance.timeOrigin + t - at));
      // Relative to the callback: when the frame's last packet came, when the sender captured it (both < 0).
      const frame = { at, rtp: meta.rtpTimestamp, presented: meta.presentedFrames, receivedMs: wall(meta.receiveTime), capturedMs: wall(meta.captureTime) };
      if (last && at - last.at >= ${GAP_MS}) window.gaps.push({ fromMs: last.at, toMs: at, before: last, after: frame });
      last = frame;
      video.requestVideoFrameCallback(step);
    };
    video.requestVideoFrameCallback(step);
  };
  const find = () => { const v = document.querySelector('video'); if (v) watch(v); else setTimeout(find, 100); };
  find();
})()`;
type GapFrame = { rtp?: number; presented?: number; receivedMs?: number; capturedMs?: number };
type Gap = { fromMs: number; toMs: number; before: GapFrame; after: GapFrame };
/** The receiving Chromium's WebRTC log (--trace): what its receiver says about NACK, FEC, keyframes and frames. */
const CHROMIUM_TRACE_LOG = ['--enable-logging=stderr', '--v=0',
  '--vmodule=*/rtp_rtcp/source/flexfec_receiver*=2,*/video/rtp_video_stream_receiver2*=2,*/video/video_receive_stream2*=2,*/modules/video_coding/*=2,*/video/video_stream_buffer_controller*=2,*/video/receive_statistics_proxy*=1'];
let chromiumLogPath = '';
/** Chromium's log lines from `fromMs` to `toMs` (its prefix carries MMDD/HHMMSS.micros in local time, UTC here). */
async function chromiumLines(fromMs: number, toMs: number): Promise<string[]> {
  const text = await readFile(chromiumLogPath, 'utf8').catch(() => '');
  const year = new Date().getUTCFullYear();
  return text.split('\n').filter((line) => {
    const m = /:(\d\d)(\d\d)\/(\d\d)(\d\d)(\d\d)\.(\d{6}):/.exec(line);
    if (!m) return false;
    const at = Date.UTC(year, Number(m[1]) - 1, Number(m[2]), Number(m[3]), Number(m[4]), Number(m[5])) + Number(m[6]) / 1000;
    return at >= fromMs && at <= toMs;
  });
}
/**
 * Writes each of Chrome's freezes (as its counters rose between two samples: the freeze ended in that
 * half second), then each gap, with the sender's and the receiver's lines from before it to its end.
 */
async function writeTrace(name: string, samples: Sample[], gaps: Gap[], appLogs: AppLogLine[] | undefined): Promise<void> {
  if (!args.trace) return;
  const out: string[] = [];
  const appLines = (fromMs: number, toMs: number): string[] => (appLogs ?? []).filter((l) => Number(l.time) >= fromMs && Number(l.time) <= toMs && l.msg !== 'video rate')
    .map((l) => `app ${new Date(Number(l.time)).toISOString()} ${l.msg} ${JSON.stringify({ ...l, time: undefined, msg: undefined, level: undefined, pid: undefined, hostname: undefined, name: undefined, sessionId: undefined })}`);
  for (const [i, sample] of samples.entries()) {
    const previous = samples[i - 1];
    if (!previous || !(delta(previous, sample, 'freezeCount') > 0)) continue;
    const frozenMs = delta(previous, sample, 'totalFreezesDuration') * 1000;
    out.push(`\n=== freeze: ${delta(previous, sample, 'freezeCount')} ending ${new Date(previous.wallMs).toISOString()}-${new Date(sample.wallMs).toISOString()}, ${Math.round(frozenMs)} ms; `
      + `in that half second ${delta(previous, sample, 'framesDropped')} frames dropped, ${delta(previous, sample, 'keyFramesDecoded')} keyframes, ${delta(previous, sample, 'pliCount')} PLIs, ${delta(previous, sample, 'nackCount')} NACKs`);
    out.push(...appLines(previous.wallMs - frozenMs - 300, sample.wallMs));
  }
  out.push(`\n${gaps.length} gaps of ${GAP_MS} ms or more between presented frames (several presented: the page's callbacks were late, not the frames)`);
  for (const gap of gaps) {
    const { before, after } = gap;
    const mediaMs = before.rtp !== undefined && after.rtp !== undefined ? Math.round(((after.rtp - before.rtp) >>> 0) / 90) : '?';
    out.push(`\n=== gap ${Math.round(gap.toMs - gap.fromMs)} ms from ${new Date(gap.fromMs).toISOString()}: ${mediaMs} ms of media, `
      + `${(after.presented ?? 0) - (before.presented ?? 0)} presented; the frame after: received ${after.receivedMs} ms, captured ${after.capturedMs} ms before (before: ${before.receivedMs}, ${before.capturedMs})`);
    out.push(...appLines(gap.fromMs - 400, gap.toMs));
    for (const line of await chromiumLines(gap.fromMs - 400, gap.toMs)) out.push(`rx ${line}`);
  }
  await writeFile(join(args.trace, `${name}.txt`), out.join('\n'));
}
type AppLogLine = Record<string, unknown>;

/** The emulator's seed for every run: svc and libwebrtc see the same draws. */
const SEED = 26;
const PROFILES: Profile[] = [
  { name: 'clean', phases: [{ seconds: SECONDS, rateKbit: 20_000 }] },
  { name: 'rtt60', phases: [{ seconds: SECONDS, rateKbit: 20_000 }], impairment: symmetric(60, 5), about: 'RTT 60 ms ± 5 ms jitter each way' },
  { name: 'rtt40loss1', phases: [{ seconds: SECONDS, rateKbit: 20_000 }], impairment: symmetric(40, 0, 0.01), about: 'RTT 40 ms, 1 % loss each way' },
  { name: 'loss5', phases: [{ seconds: SECONDS, rateKbit: 20_000 }], impairment: symmetric(0, 0, 0.05), about: '5 % loss each way' },
  { name: 'loss10', phases: [{ seconds: SECONDS, rateKbit: 20_000 }], impairment: symmetric(0, 0, 0.1), about: '10 % loss each way' },
  { name: 'rtt100loss5', phases: [{ seconds: SECONDS, rateKbit: 20_000 }], impairment: symmetric(100, 0, 0.05), about: 'RTT 100 ms, 5 % loss each way' },
  { name: '3mbit', phases: [{ seconds: SECONDS, rateKbit: 3000 }] },
  { name: 'drop', phases: [{ seconds: 10, rateKbit: 20_000 }, { seconds: 15, rateKbit: 2000 }, { seconds: 15, rateKbit: 20_000 }] },
  { name: 'drop05', phases: [{ seconds: 10, rateKbit: 20_000 }, { seconds: 15, rateKbit: 500 }, { seconds: 15, rateKbit: 20_000 }] },
].filter((p) => !args.only || args.only.split(',').includes(p.name));

type Stats = {
  framesDecoded?: number; freezeCount?: number; totalFreezesDuration?: number; keyFramesDecoded?: number; pliCount?: number;
  nackCount?: number; packetsLost?: number; bytesReceived?: number; jitterBufferDelay?: number; jitterBufferEmittedCount?: number; framesDropped?: number;
  frameWidth?: number; frameHeight?: number;
};
type Sample = { atMs: number; wallMs: number; phase: number; stats: Stats };

const RECEIVER_STATS = `(async (pc) => {
  const report = await pc.getStats();
  let video;
  report.forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video') video = s; });
  return video ?? {};
})`;

/** Runs the phases, changing the link's rate between them, sampling the receiver every 500 ms. */
async function measure(link: ShapedLink, profile: Profile, read: () => Promise<Stats>): Promise<Sample[]> {
  const samples: Sample[] = [];
  for (const [index, phase] of profile.phases.entries()) {
    if (link.rateKbit !== phase.rateKbit) await link.setRate(phase.rateKbit);
    const end = performance.now() + phase.seconds * 1000;
    while (performance.now() < end) {
      const stats: Stats = await read().catch(() => ({}));
      samples.push({ atMs: performance.now(), wallMs: Date.now(), phase: index, stats });
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  return samples;
}

const delta = (a: Sample, b: Sample, key: keyof Stats): number => (b.stats[key] ?? 0) - (a.stats[key] ?? 0);
const seconds = (a: Sample, b: Sample): number => (b.atMs - a.atMs) / 1000;

function summarize(profile: Profile, samples: Sample[], firstFrameMs: number | undefined, inputToPhotonMs: number[]): (string | number)[] {
  // The first two seconds are start-up (ICE, DTLS, the first keyframe): measured separately as first frame.
  const measured = samples.filter((s) => s.atMs - samples[0].atMs >= 2000);
  const first = measured[0];
  const last = measured.at(-1)!;
  const fps = delta(first, last, 'framesDecoded') / seconds(first, last);
  const kbps = (delta(first, last, 'bytesReceived') * 8) / seconds(first, last) / 1000;
  const third = Math.floor(measured.length / 3);
  const jb = (a: Sample, b: Sample): number => {
    const emitted = delta(a, b, 'jitterBufferEmittedCount');
    return emitted > 0 ? (delta(a, b, 'jitterBufferDelay') / emitted) * 1000 : 0;
  };
  const row: (string | number)[] = [
    fps, delta(first, last, 'freezeCount'), delta(first, last, 'totalFreezesDuration'), delta(first, last, 'keyFramesDecoded'),
    delta(first, last, 'pliCount'), delta(first, last, 'nackCount'), delta(first, last, 'packetsLost'), kbps, smallest(measured),
    jb(measured[0], measured[third]), jb(measured[measured.length - third - 1], last), firstFrameMs === undefined ? 'never' : Math.round(firstFrameMs),
    ...inputToPhoton(inputToPhotonMs),
  ];
  if (profile.phases.length === 3) {
    const during = measured.filter((s) => s.phase === 1);
    const before = measured.filter((s) => s.phase === 0);
    const after = measured.filter((s) => s.phase === 2);
    const duringFps = during.length > 1 ? delta(during[0], during.at(-1)!, 'framesDecoded') / seconds(during[0], during.at(-1)!) : 0;
    const beforeKbps = before.length > 1 ? (delta(before[0], before.at(-1)!, 'bytesReceived') * 8) / seconds(before[0], before.at(-1)!) / 1000 : 0;
    // Recovery: the first 2 s window after the return whose rate is at 90 % of the rate before the drop.
    const back = after.find((s, i) => {
      const later = after.find((t) => t.atMs >= s.atMs + 2000);
      return later !== undefined && i >= 0 && (delta(s, later, 'bytesReceived') * 8) / seconds(s, later) / 1000 >= 0.9 * beforeKbps;
    });
    row.push(duringFps, back ? ((back.atMs - after[0].atMs) / 1000).toFixed(1) : 'not in time');
  }
  return row;
}

/** The smallest frame size the receiver decoded in the samples, as WIDTHxHEIGHT. */
function smallest(samples: Sample[]): string {
  const sizes = samples.filter((s) => s.stats.frameWidth && s.stats.frameHeight).map((s) => [s.stats.frameWidth!, s.stats.frameHeight!]);
  if (sizes.length === 0) return '-';
  const [width, height] = sizes.reduce((a, b) => (b[0] * b[1] < a[0] * a[1] ? b : a));
  return `${width}x${height}`;
}

/** Input-to-photon p50 and p90, ms, and how many inputs were seen on screen. */
function inputToPhoton(values: number[]): (number | string)[] {
  if (values.length === 0) return ['none', 'none', 0];
  const sorted = [...values].sort((a, b) => a - b);
  return [percentile(sorted, 50), percentile(sorted, 90), values.length];
}

/** Page script: from 2 s on, one input every 90-150 ms (timed in the page, so CDP latency stays out) until stopInputs(). */
const START_INPUTS = (send: string): string => `(() => {
  window.inputsRunning = true;
  window.stopInputs = () => { window.inputsRunning = false; };
  (async () => {
    await new Promise((r) => setTimeout(r, 2000));
    while (window.inputsRunning) {
      await new Promise((r) => setTimeout(r, 90 + Math.random() * 60));
      ${send};
    }
  })();
})()`;

/** The frame barcode's code (streaming-app/client), for the libwebrtc pages: the same cells, checksum and frame timing as svc's. */
const BARCODE_JS = `const BARCODE_CELLS = ${BARCODE_CELLS}, BARCODE_ROWS = ${BARCODE_ROWS}, LUMA_ONE = ${LUMA_ONE}, LUMA_ZERO = ${LUMA_ZERO};
${barcodeLayout.toString()}
${barcodeChecksum.toString()}
${encodeBarcode.toString()}
${decodeBarcode.toString()}
${FrameTiming.toString()}`;

/** The link as the profile starts it: its first rate, its impairment, the emulator's draws from the start. */
async function prepare(link: ShapedLink, profile: Profile): Promise<void> {
  await link.setRate(profile.phases[0].rateKbit);
  await link.impair(profile.impairment ?? { down: NO_IMPAIRMENT, up: NO_IMPAIRMENT }, SEED);
}

/** What svc's rate control did in a run, from the app's 'session ended' line. */
let svcRateControl = '';
/** With --audio: what became of the Opus packets the link lost. */
let svcAudio = '';

type AudioStats = { packetsReceived?: number; packetsLost?: number; concealmentEvents?: number; concealedSamples?: number; totalSamplesReceived?: number };
const AUDIO_STATS = `(async () => {
  const report = await svcStream.client.peerConnection.getStats();
  let audio;
  report.forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'audio') audio = s; });
  return audio ?? {};
})()`;

/**
 * Opus packets lost against what the receiver concealed: a lost packet that in-band FEC does not recover
 * is concealed (one concealment event per run of losses, its samples as concealed).
 */
function describeAudio(stats: AudioStats, app: AppProcess): string {
  const changes = app.logs.filter((l) => l.msg === 'audio mode changed').map((l) => `${l.to} at loss ${l.loss}`);
  const concealedMs = ((stats.concealedSamples ?? 0) / 48_000) * 1000;
  const heardS = (stats.totalSamplesReceived ?? 0) / 48_000;
  return `svc audio: ${stats.packetsLost ?? 0} packets lost of ${(stats.packetsReceived ?? 0) + (stats.packetsLost ?? 0)}, `
    + `${stats.concealmentEvents ?? 0} concealment events, ${concealedMs.toFixed(0)} ms concealed in ${heardS.toFixed(1)} s; `
    + `mode changes: ${changes.length ? changes.join(', ') : 'none'}`;
}

async function svcRun(link: ShapedLink, receiver: BrowserContext, profile: Profile, degradation: string, fec: string): Promise<(string | number)[]> {
  await prepare(link, profile);
  const video = `exec ${process.execPath} ${INPUT_RENDERER}`;
  const app: AppProcess = await startApp({
    STREAMING_DEGRADATION: degradation, STREAMING_VIDEO_FEC: fec, STREAMING_AUDIO: String(args.audio),
    STREAMING_BIND_ADDRESS: link.hostAddress, STREAMING_VIDEO_SIZE: `${WIDTH}x${HEIGHT}`, STREAMING_VIDEO_FPS: String(FPS),
    STREAMING_VIDEO_BITRATE_KBPS: String(MAX_KBPS), STREAMING_SOURCE: 'pipe', LOG_LEVEL: args['app-logs'] || args.trace ? 'debug' : 'info', STREAMING_FRAME_BARCODE: 'false',
    STREAMING_APP_COMMAND: args.audio ? `${TONE} & ${video}` : video,
  });
  const page = await receiver.newPage();
  try {
    const signal = `ws://${link.hostAddress}:${app.streamingPort}/sign_in`;
    await page.goto(`http://${link.hostAddress}:${app.streamingPort}/client/?autostart=1&signal=${encodeURIComponent(signal)}`);
    const read = async (): Promise<Stats> => ((await page.evaluate('svcStream.receiverStats()')) ?? {}) as Stats;
    await page.evaluate(START_INPUTS('svcStream.sendPointer(Math.random(), Math.random())'));
    if (args.trace) await page.evaluate(RECORD_GAPS);
    const samples = await measure(link, profile, read);
    await page.evaluate('window.stopInputs()');
    if (args.trace) await writeTrace(`${profile.name}-svc-${degradation}-fec-${fec}`, samples, await page.evaluate('window.gaps') as Gap[], app.logs);
    // First frame: the client's new WebSocket to the first frame presented (the page's own load over the
    // link is left out, as the libwebrtc pages are not loaded over it).
    const { inputToPhotonMs, setupMs } = await page.evaluate('svcStream.snapshot()') as { inputToPhotonMs: number[]; setupMs?: number };
    if (args.audio) svcAudio = describeAudio(await page.evaluate(AUDIO_STATS) as AudioStats, app);
    return summarize(profile, samples, setupMs, inputToPhotonMs);
  } finally {
    await page.close();
    const ended = await app.waitForLog((l) => l.msg === 'session ended', 10_000).catch(() => undefined);
    const video = ended?.video as Record<string, unknown> | undefined;
    const encoder = ended?.encoder as Record<string, unknown> | undefined;
    const startedAt = app.logs.find((l) => l.msg === 'media transport connected')?.time as number | undefined;
    const changes = app.logs.filter((l) => l.msg === 'video operating point changed')
      .map((l) => `${l.width}x${l.height}@${l.fps} at ${(((l.time as number) - (startedAt ?? 0)) / 1000).toFixed(1)} s (${l.estimateKbps} kbit/s)`);
    const steps = changes.length ? `; ${degradation}: ${changes.join(', ')}` : '';
    const fecChanges = app.logs.filter((l) => l.msg === 'video fec').map((l) => `${l.ratio} at ${(((l.time as number) - (startedAt ?? 0)) / 1000).toFixed(1)} s (loss ${l.loss})`);
    const fecNote = `; FEC ${fec === 'true' ? `${video?.fecPackets} packets (${(100 * Number(video?.fecPackets) / Math.max(1, Number(video?.mediaPackets))).toFixed(1)} % of media), ratio ${fecChanges.join(', ') || 'never on'}` : 'off'}`;
    svcRateControl = video ? `svc rate control: ${video.overuses} delay decreases, ${video.lossBackoffs} loss backoffs, ${video.retransmitted} retransmitted, `
      + `${video.resentUnasked} resent unasked, ${video.resentLost ?? 0} lost copies resent, ${video.leftToFec ?? 0} left to FEC, refused ${JSON.stringify(video.retransmissionsRefused)}, ${encoder?.keyframes} keyframes encoded, final target ${video.targetKbps} kbit/s${steps}${fecNote}` : '';
    await app.stop();
    if (args['app-logs']) await writeFile(join(args['app-logs'], `${profile.name}-${degradation}-fec-${fec}.jsonl`), app.logs.map((l) => JSON.stringify(l)).join('\n'));
  }
}

/**
 * The sender's page: a canvas with moving bars and fresh noise, captured at FPS, sent with H.264 preferred;
 * the frame barcode carries the newest input that came in on the DataChannel.
 */
const SENDER_SETUP = `(async ({ width, height, fps, maxKbps }) => {
  window.setupStartedAt = Date.now();
  ${BARCODE_JS}
  const bits = new Uint8Array(64);
  const layout = barcodeLayout(width);
  let latestInput = 0;
  const canvas = document.createElement('canvas');
  canvas.width = width; canvas.height = height;
  document.body.append(canvas);
  const g = canvas.getContext('2d', { willReadFrequently: true });
  const noise = g.createImageData(width, height);
  let t = 0;
  setInterval(() => {
    t++;
    for (let i = 0; i < 8; i++) { g.fillStyle = 'hsl(' + ((i * 45 + t * 3) % 360) + ',80%,50%)'; g.fillRect(i * width / 8, 0, width / 8, height); }
    g.fillStyle = '#fff'; g.fillRect((t * 7) % width, height / 3, 40, 40);
    const img = g.getImageData(0, 0, width, height);
    for (let i = 0; i < img.data.length; i += 4) { const n = (Math.random() - 0.5) * 48; img.data[i] += n; img.data[i + 1] += n; img.data[i + 2] += n; }
    g.putImageData(img, 0, 0);
    encodeBarcode(t, latestInput, bits);
    for (let i = 0; i < 64; i++) {
      g.fillStyle = bits[i] ? '#fff' : '#000';
      g.fillRect((i % BARCODE_CELLS) * layout.cellWidth, Math.floor(i / BARCODE_CELLS) * layout.cellHeight, layout.cellWidth, layout.cellHeight);
    }
  }, 1000 / fps);
  const stream = canvas.captureStream(fps);
  const pc = new RTCPeerConnection();
  const input = pc.createDataChannel('input');
  input.onmessage = (e) => { latestInput = Math.max(latestInput, Number(e.data)); };
  const transceiver = pc.addTransceiver(stream.getVideoTracks()[0], { direction: 'sendonly', sendEncodings: [{ maxBitrate: maxKbps * 1000 }] });
  const codecs = RTCRtpSender.getCapabilities('video').codecs;
  const h264 = codecs.filter((c) => c.mimeType === 'video/H264');
  if (h264.length) transceiver.setCodecPreferences([...h264, ...codecs.filter((c) => c.mimeType !== 'video/H264')]);
  window.candidates = [];
  pc.onicecandidate = (e) => { if (e.candidate) window.candidates.push(e.candidate.toJSON()); };
  window.pc = pc;
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((r) => { if (pc.iceGatheringState === 'complete') r(); pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === 'complete') r(); }; });
  return pc.localDescription.sdp;
})`;

/** The receiver's page; inputs go to the sender on the DataChannel, and each presented frame's barcode says which it shows (as svc's FrameMeter). */
const RECEIVER_SETUP = `(async (offer) => {
  ${BARCODE_JS}
  const pc = new RTCPeerConnection();
  window.pc = pc;
  window.inputToPhotonMs = [];
  const pending = new Map();
  let seq = 0;
  let channel;
  pc.ondatachannel = (e) => { channel = e.channel; };
  window.sendInput = () => {
    if (channel?.readyState !== 'open') return;
    seq++;
    pending.set(seq, performance.now());
    channel.send(String(seq));
  };
  const meter = (video) => {
    const canvas = document.createElement('canvas');
    canvas.width = BARCODE_CELLS; canvas.height = BARCODE_ROWS;
    const ctx = canvas.getContext('2d', { willReadFrequently: true });
    ctx.imageSmoothingEnabled = false;
    const timing = new FrameTiming();
    // Drawn for the sender's size; libwebrtc may send it scaled down (its resolution adaptation).
    const drawn = barcodeLayout(${WIDTH});
    const step = (_now, meta) => {
      window.firstFrameAt ??= Date.now();
      const scale = meta.width / ${WIDTH};
      const layout = { width: drawn.width * scale, height: drawn.height * scale };
      let frame;
      try { frame = new VideoFrame(video); } catch {}
      ctx.drawImage(frame ?? video, 0, 0, layout.width, layout.height, 0, 0, BARCODE_CELLS, BARCODE_ROWS);
      const timestampUs = frame?.timestamp;
      frame?.close();
      const read = decodeBarcode(ctx.getImageData(0, 0, BARCODE_CELLS, BARCODE_ROWS).data, 4);
      const shown = timing.shown(meta.mediaTime, read && { inputSeq: read.inputSeq, timestampUs });
      if (shown !== undefined) {
        for (const [sent, at] of pending) {
          if (sent > shown) continue;
          pending.delete(sent);
          if (sent === shown) window.inputToPhotonMs.push(meta.expectedDisplayTime - at);
        }
      }
      video.requestVideoFrameCallback(step);
    };
    video.requestVideoFrameCallback(step);
  };
  pc.ontrack = (e) => {
    e.receiver.playoutDelayHint = 0;
    e.receiver.jitterBufferTarget = 0;
    const video = document.createElement('video');
    video.muted = true; video.autoplay = true; video.playsInline = true;
    video.srcObject = new MediaStream([e.track]);
    document.body.append(video);
    meter(video);
  };
  await pc.setRemoteDescription({ type: 'offer', sdp: offer });
  await pc.setLocalDescription(await pc.createAnswer());
  await new Promise((r) => { if (pc.iceGatheringState === 'complete') r(); pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === 'complete') r(); }; });
  return pc.localDescription.sdp;
})`;

async function libwebrtcRun(link: ShapedLink, sender: BrowserContext, receiver: BrowserContext, profile: Profile): Promise<(string | number)[]> {
  await prepare(link, profile);
  const send: Page = await sender.newPage();
  const receive: Page = await receiver.newPage();
  try {
    const offer = await send.evaluate(`${SENDER_SETUP}(${JSON.stringify({ width: WIDTH, height: HEIGHT, fps: FPS, maxKbps: MAX_KBPS })})`) as string;
    const answer = await receive.evaluate(`${RECEIVER_SETUP}(${JSON.stringify(offer)})`) as string;
    await send.evaluate(`window.pc.setRemoteDescription({ type: 'answer', sdp: ${JSON.stringify(answer)} })`);
    const read = async (): Promise<Stats> => (await receive.evaluate(`${RECEIVER_STATS}(window.pc)`)) as Stats;
    await receive.evaluate(START_INPUTS('window.sendInput()'));
    if (args.trace) await receive.evaluate(RECORD_GAPS);
    const samples = await measure(link, profile, read);
    await receive.evaluate('window.stopInputs()');
    if (args.trace) await writeTrace(`${profile.name}-libwebrtc`, samples, await receive.evaluate('window.gaps') as Gap[], undefined);
    const inputToPhotonMs = await receive.evaluate('window.inputToPhotonMs') as number[];
    // First frame: the sender's offer started to the first frame presented (wall clock: two pages).
    const startedAt = await send.evaluate('window.setupStartedAt') as number;
    const firstFrameAt = await receive.evaluate('window.firstFrameAt') as number | undefined;
    return summarize(profile, samples, firstFrameAt === undefined ? undefined : firstFrameAt - startedAt, inputToPhotonMs);
  } finally {
    await send.close();
    await receive.close();
  }
}

async function main(): Promise<void> {
  const why = shapedLinkUnavailable();
  if (why) {
    console.log(`bench/stream/network.ts: cannot run: ${why}`);
    return;
  }
  const link = await ShapedLink.create(20_000);
  const dirs = [await mkdtemp(join(tmpdir(), 'svc-bench-rx-')), await mkdtemp(join(tmpdir(), 'svc-bench-tx-'))];
  // Host candidates as addresses, not mDNS names (the receiver's namespace has no multicast DNS), and on
  // every interface: without camera permission Chrome offers only the default route's, not the veth's.
  const browserArgs = [...CHROMIUM_ARGS, '--disable-features=WebRtcHideLocalIpsWithMdns', '--force-webrtc-ip-handling-policy=default',
    '--autoplay-policy=no-user-gesture-required'];
  chromiumLogPath = args.trace ? join(args.trace, 'chromium-receiver.log') : '';
  const receiver = await chromium.launchPersistentContext(dirs[0], {
    executablePath: await link.wrapper(CHROMIUM.path, chromiumLogPath || undefined), args: [...browserArgs, ...(chromiumLogPath ? CHROMIUM_TRACE_LOG : [])], headless: true,
  });
  const sender = await chromium.launchPersistentContext(dirs[1], { executablePath: CHROMIUM.path, args: browserArgs, headless: true });
  try {
    console.log(`${WIDTH}x${HEIGHT}@${FPS}, H.264, max ${MAX_KBPS} kbit/s, ${SECONDS} s per profile (drop: 10 + 15 + 15 s); load ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    for (const profile of PROFILES) {
      const columns = ['peer', 'fps', 'freezes', 'frozen s', 'keyframes', 'PLIs', 'NACKs', 'lost', 'kbit/s', 'smallest', 'jb ms 1st/3', 'jb ms last/3', 'first frame ms', 'i2p p50 ms', 'i2p p90 ms', 'i2p n'];
      if (profile.phases.length === 3) columns.push('fps in drop', 'recovery s');
      const svcRows: (string | number)[][] = [];
      const notes: string[] = [];
      for (const degradation of DEGRADATIONS) {
        for (const fec of FECS) {
          const name = ['svc', DEGRADATIONS.length > 1 ? degradation : '', FECS.length > 1 ? (fec === 'true' ? 'FEC' : 'no FEC') : ''].filter(Boolean).join(' ');
          svcRows.push([name, ...await svcRun(link, receiver, profile, degradation, fec)]);
          if (svcRateControl) notes.push(`${name}: ${svcRateControl}`);
          if (svcAudio) notes.push(svcAudio);
        }
      }
      const libwebrtc = await libwebrtcRun(link, sender, receiver, profile);
      const ratio = (index: number): string => {
        const a = svcRows[0][index + 1];
        const b = libwebrtc[index];
        return typeof a === 'number' && typeof b === 'number' && b !== 0 ? (a / b).toFixed(2) : '–';
      };
      printTable(`profile ${profile.name} (${profile.phases.map((p) => `${p.rateKbit / 1000} Mbit/s ${p.seconds} s`).join(' → ')}${profile.about ? `, ${profile.about}` : ''}); load ${loadavg()[0].toFixed(2)}`,
        columns, [...svcRows, ['libwebrtc', ...libwebrtc], [`${svcRows[0][0]}/libwebrtc`, ...libwebrtc.map((_, i) => ratio(i))]]);
      for (const note of notes) console.log(note);
    }
  } finally {
    await sender.close();
    await receiver.close();
    await link.destroy();
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  }
}

await main();
