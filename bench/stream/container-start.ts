// From Start to the first frame: the reference streaming app as a team deploys it, its image on podman
// (the platform's docker runtime against podman's Docker API), side by side with the same app on the
// process runtime. Chromium → proxy → platform → instance, 640x360@30, coturn on loopback as the platform's
// STUN/TURN server (what `turn.server: auto` picks when coturn is installed). Every sample is a fresh
// instance (one session per container), granted idle: the figure is the session's own set-up.
//
//   CONTAINERS_CONF=images/containers.conf flock /tmp/svc-bench.lock node bench/stream/container-start.ts [--samples 5] [--runtimes process,container]
//
// Needs root, podman with the project's images (npm run images; SVC_IMAGE_TAG picks another tag of
// localhost/svc/streaming-app, e.g. one built from a branch), Chromium and coturn.
// Per sample, ms after the Start click: the instance reserved, the offer, ICE connected, the peer
// connection connected (DTLS done), the first frame due on screen (requestVideoFrameCallback's
// expectedDisplayTime). Target: first frame ≤ 1,000 ms on both. The same steps as the app saw them, from its
// log lines (LOG_LEVEL=debug, read back through the platform's logs API), on the same clock: the hello, the
// offer sent, its candidates gathered, ICE connected, DTLS done (peer connected) and the first frame sent,
// and the CPU time the app spent from the hello to that frame: little CPU over a long wait is a starved CPU
// share (or a slow network), not work.
import { loadavg } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import type { Page } from 'playwright-core';
import { agentNameOf } from '../../api/src/compute/worker.ts';
import { image, removeAgentLeftovers, startEngine, type Engine } from '../../api/test/helpers/podman.ts';
import { freeTcpPort, freeUdpRange } from '../../streaming-app/test/helpers.ts';
import { goto, startStreamingStack, waitForFreeInstance, waitForSnapshot, type StreamingStack } from '../../test/helpers/streaming-stack.ts';
import { percentile, printTable } from '../lib/report.ts';
import { z } from 'zod';

const { values: args } = parseArgs({ options: { samples: { type: 'string', default: '5' }, runtimes: { type: 'string', default: 'process,container' } } });
const SAMPLES = Number(args.samples);
type Runtime = 'process' | 'container';
const RUNTIMES = args.runtimes.split(',').map((name) => z.enum(['process', 'container']).parse(name));
const TARGET_MS = 1000;
const STEPS = ['reserved', 'offer', 'ice-connected', 'peer-connected', 'first frame'] as const;
/** The app's log messages that mark its steps (peer.ts, session.ts), by the step's name in the table. */
const APP_STEPS = {
  hello: (line: AppLine) => line.msg === 'session started',
  'offer sent': (line: AppLine) => line.msg === 'offer sent',
  gathered: (line: AppLine) => line.msg === 'ice gathering complete',
  'ice connected': (line: AppLine) => line.msg === 'ice connection state' && line.iceState === 'connected',
  'dtls done': (line: AppLine) => line.msg === 'media transport connected',
  'frame sent': (line: AppLine) => line.msg === 'first frame sent',
} as const;
type AppStep = keyof typeof APP_STEPS;
type Sample = Record<(typeof STEPS)[number] | AppStep, number> & { path: string; setupCpuMs: number };
const appLine = z.object({
  time: z.number(), msg: z.string(), iceState: z.string().optional(), state: z.string().optional(), setupCpuMs: z.number().optional(),
});
type AppLine = z.infer<typeof appLine>;
const logsAnswer = z.object({ logs: z.array(z.object({ instanceId: z.string(), text: z.string() })) });

/**
 * Armed before Start, on the page's clock: when the Start button took the click (the automation's own
 * round trip left out), and when the first frame of the stream is due on screen.
 */
const ARM = `void (document.getElementById('action').addEventListener('click', () => { window.clickedAt = performance.now(); }, { capture: true }),
  window.firstFrameAt = new Promise((resolve) => document.getElementById('video')
    .requestVideoFrameCallback((_now, frame) => resolve(frame.expectedDisplayTime))))`;

async function sample(stack: StreamingStack): Promise<Sample> {
  await waitForFreeInstance(stack);
  const page: Page = await stack.context.newPage();
  try {
    await goto(page, stack.pageUrl());
    await page.evaluate(ARM);
    await page.click('#action');
    const clickedAt = await page.evaluate('window.clickedAt') as number;
    const clickedAtEpoch = await page.evaluate('performance.timeOrigin') as number + clickedAt;
    const shown = await waitForSnapshot(page, 'the first frame', (s) => s.framesDecodedFromBarcode >= 1, 60_000).catch(async (error: Error) => {
      const told = (await sessionLines(stack, clickedAtEpoch)).map((line) => `${Math.round(line.time - clickedAtEpoch)} ${line.msg}`);
      throw new Error(`${error.message}\n  the app logged (ms after the click): ${told.join('; ')}`);
    });
    const timeline = await page.evaluate('svcStream.client.timeline') as Record<string, number>;
    const firstFrame = await page.evaluate('window.firstFrameAt') as number;
    const after = (at: number | undefined) => at === undefined ? Number.NaN : at - clickedAt;
    return {
      reserved: after(timeline.reserved), offer: after(timeline.offer), 'ice-connected': after(timeline['ice-connected']),
      'peer-connected': after(timeline['peer-connected']), 'first frame': after(firstFrame),
      ...await appSteps(stack, clickedAtEpoch),
      path: `${shown.metrics.localCandidateType}→${(shown.metrics as { remoteCandidateType?: string }).remoteCandidateType}`,
    };
  } finally {
    await page.close({ runBeforeUnload: true });
  }
}

/** The app's steps in ms after the click, and the CPU its set-up took, once its log has them all. */
async function appSteps(stack: StreamingStack, clickedAtEpoch: number): Promise<Record<AppStep, number> & { setupCpuMs: number }> {
  for (let attempt = 0; ; attempt++) {
    const lines = await sessionLines(stack, clickedAtEpoch);
    const steps = Object.fromEntries(Object.entries(APP_STEPS).map(([step, marks]) => [step, (lines.find(marks)?.time ?? Number.NaN) - clickedAtEpoch]));
    // The last lines come through the engine's log stream a moment after the frame is on screen.
    if (Object.values(steps).every(Number.isFinite) || attempt === 10) {
      return { ...steps as Record<AppStep, number>, setupCpuMs: lines.find(APP_STEPS['frame sent'])?.setupCpuMs ?? Number.NaN };
    }
    await sleep(300);
  }
}

/** The app's log lines since the click, of the instance whose session started after it. */
async function sessionLines(stack: StreamingStack, clickedAtEpoch: number): Promise<AppLine[]> {
  const url = `${stack.svc.url}/v2/svc/functions/${stack.fn.id}/versions/${stack.fn.versionId}/logs?since=${new Date(clickedAtEpoch - 60_000).toISOString()}`;
  const answer = logsAnswer.parse(await (await fetch(url, { headers: { authorization: `Bearer ${stack.key}` } })).json());
  const lines = answer.logs.flatMap((entry) => {
    try {
      const parsed = appLine.safeParse(JSON.parse(entry.text));
      return parsed.success && parsed.data.time >= clickedAtEpoch ? [{ instanceId: entry.instanceId, ...parsed.data }] : [];
    } catch {
      return []; // not one of the app's JSON lines
    }
  });
  const instanceId = lines.find(APP_STEPS.hello)?.instanceId;
  return lines.filter((line) => line.instanceId === instanceId);
}

async function runtimeSamples(name: string, extra: { image?: string; engine?: Engine }): Promise<Sample[]> {
  const relay = await freeUdpRange(30);
  const stack = await startStreamingStack({
    name, image: extra.image, environment: [{ key: 'LOG_LEVEL', value: 'debug' }],
    config: {
      turn: { server: 'coturn', port: await freeTcpPort(), relayPortRange: `${relay.min}-${relay.max}` },
      ...(extra.engine ? { compute: { agent: { runtime: 'docker', dockerSocket: extra.engine.socketPath } } } : {}),
    },
  });
  const samples: Sample[] = [];
  try {
    await sample(stack); // warm-up, not recorded (Chromium's and the app's first start)
    for (let n = 0; n < SAMPLES; n++) {
      // A session that never shows a frame is told and counted, and the run goes on.
      const taken = await sample(stack).catch((error: Error) => console.error(`${name}: sample ${n + 1} failed: ${error.message.slice(0, 800)}`));
      if (taken) samples.push(taken);
    }
  } finally {
    await stack.close();
    if (extra.engine) await removeAgentLeftovers(extra.engine, agentNameOf(path.join(stack.svc.database.dataDir, 'agent')));
  }
  return samples;
}

const load = () => loadavg()[0].toFixed(1);
const runs: { runtime: Runtime; load: string; samples: Sample[] }[] = [];
for (const runtime of RUNTIMES) {
  const loadAtStart = load();
  if (runtime === 'process') {
    runs.push({ runtime, load: loadAtStart, samples: await runtimeSamples('bench-process', {}) });
    continue;
  }
  const engine = await startEngine();
  try {
    runs.push({ runtime, load: loadAtStart, samples: await runtimeSamples('bench-container', { image: image('streaming-app'), engine }) });
  } finally {
    await engine.close();
  }
}

const sorted = (samples: Sample[], step: keyof Sample) => samples.map((s) => Number(s[step])).filter(Number.isFinite).sort((a, b) => a - b);
printTable('From Start to the first frame, ms after the click (640x360@30, Chromium -> proxy -> platform -> instance, loopback), p50 of each step',
  ['runtime', 'samples', ...STEPS, 'first frame p95', 'max', `p50 <= ${TARGET_MS}`, 'browser → app candidates'],
  runs.map(({ runtime, load: at, samples }) => {
    const frames = sorted(samples, 'first frame');
    const paths = [...Map.groupBy(samples, (s) => s.path)].map(([pair, some]) => `${some.length} ${pair}`).join(', ');
    return [`${runtime} (load ${at})`, `${samples.length} of ${SAMPLES}`, ...STEPS.map((step) => percentile(sorted(samples, step), 50)),
      percentile(frames, 95), frames.at(-1) ?? Number.NaN, percentile(frames, 50) <= TARGET_MS ? 'met' : 'MISSED', paths];
  }));
printTable('The same sessions as the app logged them, ms after the click, p50 / p95 of each step; the CPU the app spent from hello to first frame',
  ['runtime', ...Object.keys(APP_STEPS), 'cpu ms'], runs.map(({ runtime, samples }) => [runtime,
    ...[...Object.keys(APP_STEPS), 'setupCpuMs'].map((step) => {
      const times = sorted(samples, step as keyof Sample);
      return `${Math.round(percentile(times, 50))} / ${Math.round(percentile(times, 95))}`;
    })]));
if (runs.length === 2) {
  const p50 = (at: number) => percentile(sorted(runs[at].samples, 'first frame'), 50);
  console.log(`\ncontainer / process first frame p50: ${(p50(1) / p50(0)).toFixed(2)}.`);
}
console.log(`Load average at the end: ${load()}.`);
