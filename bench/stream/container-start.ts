// From Start to the first frame: the reference streaming app as a team deploys it, its image on podman
// (the platform's docker runtime against podman's Docker API), side by side with the same app on the
// process runtime. Chromium → proxy → platform → instance, 640x360@30, coturn on loopback as the platform's
// STUN/TURN server (what `turn.server: auto` picks when coturn is installed). Every sample is a fresh
// instance (one session per container), granted idle: the figure is the session's own set-up.
//
//   CONTAINERS_CONF=images/containers.conf flock /tmp/svc-bench.lock node bench/stream/container-start.ts [--samples 5]
//
// Needs root, podman with the project's images (npm run images; SVC_IMAGE_TAG picks another tag of
// localhost/svc/streaming-app, e.g. one built from a branch), Chromium and coturn.
// Per sample, ms after the Start click: the instance reserved, the offer, ICE connected, the peer
// connection connected (DTLS done), the first frame due on screen (requestVideoFrameCallback's
// expectedDisplayTime). Target: first frame ≤ 1,000 ms on both.
import { loadavg } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { Page } from 'playwright-core';
import { agentNameOf } from '../../api/src/compute/worker.ts';
import { image, removeAgentLeftovers, startEngine, type Engine } from '../../api/test/helpers/podman.ts';
import { freeTcpPort, freeUdpRange } from '../../streaming-app/test/helpers.ts';
import { goto, startStreamingStack, waitForFreeInstance, waitForSnapshot, type StreamingStack } from '../../test/helpers/streaming-stack.ts';
import { percentile, printTable } from '../lib/report.ts';

const { values: args } = parseArgs({ options: { samples: { type: 'string', default: '5' } } });
const SAMPLES = Number(args.samples);
const TARGET_MS = 1000;
const STEPS = ['reserved', 'offer', 'ice-connected', 'peer-connected', 'first frame'] as const;
type Sample = Record<(typeof STEPS)[number], number>;

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
    await waitForSnapshot(page, 'the first frame', (s) => s.framesDecodedFromBarcode >= 1, 60_000);
    const timeline = await page.evaluate('svcStream.client.timeline') as Record<string, number>;
    const firstFrame = await page.evaluate('window.firstFrameAt') as number;
    const after = (at: number | undefined) => at === undefined ? Number.NaN : at - clickedAt;
    return {
      reserved: after(timeline.reserved), offer: after(timeline.offer), 'ice-connected': after(timeline['ice-connected']),
      'peer-connected': after(timeline['peer-connected']), 'first frame': after(firstFrame),
    };
  } finally {
    await page.close({ runBeforeUnload: true });
  }
}

async function runtimeSamples(name: string, extra: { image?: string; engine?: Engine }): Promise<Sample[]> {
  const relay = await freeUdpRange(30);
  const stack = await startStreamingStack({
    name, image: extra.image,
    config: {
      turn: { server: 'coturn', port: await freeTcpPort(), relayPortRange: `${relay.min}-${relay.max}` },
      ...(extra.engine ? { compute: { agent: { runtime: 'docker', dockerSocket: extra.engine.socketPath } } } : {}),
    },
  });
  const samples: Sample[] = [];
  try {
    await sample(stack); // warm-up, not recorded (Chromium's and the app's first start)
    for (let n = 0; n < SAMPLES; n++) samples.push(await sample(stack));
  } finally {
    await stack.close();
    if (extra.engine) await removeAgentLeftovers(extra.engine, agentNameOf(path.join(stack.svc.database.dataDir, 'agent')));
  }
  return samples;
}

const load = () => loadavg()[0].toFixed(1);
const rows: (string | number)[][] = [];
const loadBefore = load();
const processSamples = await runtimeSamples('bench-process', {});
const loadBetween = load();
const engine = await startEngine();
let containerSamples: Sample[];
try {
  containerSamples = await runtimeSamples('bench-container', { image: image('streaming-app'), engine });
} finally {
  await engine.close();
}
for (const [runtime, samples, at] of [['process', processSamples, loadBefore], ['podman container', containerSamples, loadBetween]] as const) {
  const p50 = (step: (typeof STEPS)[number]) => percentile(samples.map((s) => s[step]).sort((a, b) => a - b), 50);
  const frames = samples.map((s) => s['first frame']).sort((a, b) => a - b);
  rows.push([`${runtime} (load ${at})`, String(samples.length), ...STEPS.map(p50), percentile(frames, 95),
    frames.at(-1)!, p50('first frame') <= TARGET_MS ? 'met' : 'MISSED']);
}
printTable('From Start to the first frame, ms after the click (640x360@30, Chromium -> proxy -> platform -> instance, loopback), p50 of each step',
  ['runtime', 'samples', ...STEPS, 'first frame p95', 'max', `p50 <= ${TARGET_MS}`], rows);
const ratio = percentile(containerSamples.map((s) => s['first frame']).sort((a, b) => a - b), 50)
  / percentile(processSamples.map((s) => s['first frame']).sort((a, b) => a - b), 50);
console.log(`\ncontainer / process first frame p50: ${ratio.toFixed(2)}. Load average at the end: ${load()}.`);
