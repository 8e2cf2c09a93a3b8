// What gives way at low rates (STREAMING_DEGRADATION), on a simulated clock: the policy alone, fed the
// estimate every 100 ms as the transport-wide feedback would; then the in-process encoder following it
// for real (frames come out at the smaller size, or fewer of them).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DegradationPolicy, kbpsNeeded, type DegradationPreference, type OperatingPoint } from '../src/degradation.ts';
import type { EncodedFrame } from '../src/encoder.ts';
import { LibavVideoEncoder, loadNodeAv } from '../src/libav-encoder.ts';
import { createLogger } from '../src/logger.ts';

const FULL = { width: 640, height: 360, fps: 30 };

/** Feeds `kbps(t)` every 100 ms for `seconds`; the points the policy chose, by time. */
function run(policy: DegradationPolicy, seconds: number, kbps: (ms: number) => number): { atMs: number; point: OperatingPoint }[] {
  const timeline: { atMs: number; point: OperatingPoint }[] = [];
  for (let now = 0; now <= seconds * 1000; now += 100) timeline.push({ atMs: now, point: policy.update(kbps(now), now) });
  return timeline;
}

const label = (p: OperatingPoint): string => `${p.width}x${p.height}@${p.fps}`;
const pointsOf = (timeline: { point: OperatingPoint }[]): string[] => [...new Set(timeline.map((t) => label(t.point)))];
const at = (timeline: { atMs: number; point: OperatingPoint }[], ms: number): string => label(timeline.find((t) => t.atMs >= ms)!.point);
/** 20 Mbit/s, 400 kbit/s from 10 to 25 s, then 20 Mbit/s again. */
const DROP = (ms: number): number => (ms >= 10_000 && ms < 25_000 ? 400 : 20_000);

test('maintain-framerate: a drop steps the size down and keeps 30 fps; the return steps it back up', () => {
  const timeline = run(new DegradationPolicy('maintain-framerate', FULL), 40, DROP);
  assert.equal(at(timeline, 9900), '640x360@30');
  assert.deepEqual(pointsOf(timeline), ['640x360@30', '480x270@30']);
  const downAt = timeline.find((t) => t.point.width < 640)!.atMs;
  assert.ok(downAt >= 11_000 && downAt <= 11_100, `down ${downAt - 10_000} ms after the drop (held a second)`);
  const upAt = timeline.find((t) => t.atMs > 25_000 && t.point.width === 640)!.atMs;
  assert.ok(upAt - 25_000 <= 2100, `back to the full size ${upAt - 25_000} ms after the return`);
});

test('maintain-resolution: the same drop halves the frame rate and keeps the size', () => {
  const timeline = run(new DegradationPolicy('maintain-resolution', FULL), 40, DROP);
  assert.deepEqual(pointsOf(timeline), ['640x360@30', '640x360@15']);
  assert.equal(at(timeline, 20_000), '640x360@15');
  assert.equal(at(timeline, 28_000), '640x360@30');
});

test('balanced gives up size first, then frame rate; every preference goes as low as the rate needs, disabled nowhere', () => {
  const deep = (ms: number): number => (ms < 10_000 ? 150 : 20_000);
  const ladders: Record<Exclude<DegradationPreference, 'disabled'>, string[]> = {
    'maintain-framerate': ['640x360@30', '480x270@30', '320x180@30'],
    'maintain-resolution': ['640x360@30', '640x360@15', '640x360@10', '640x360@5'],
    balanced: ['640x360@30', '480x270@30', '480x270@15'],
  };
  for (const [preference, expected] of Object.entries(ladders)) {
    const policy = new DegradationPolicy(preference as DegradationPreference, FULL);
    const timeline = run(policy, 25, deep);
    const down = pointsOf(timeline.filter((t) => t.atMs < 10_000));
    assert.deepEqual(down, expected, preference);
    assert.ok(kbpsNeeded(timeline.find((t) => t.atMs === 9900)!.point) <= 150, `${preference}: low enough for 150 kbit/s`);
    assert.equal(at(timeline, 25_000), '640x360@30', `${preference}: all the way back up`);
  }
  assert.deepEqual(pointsOf(run(new DegradationPolicy('disabled', FULL), 25, deep)), ['640x360@30'], 'disabled: the full picture at any rate');
});

test('no step for a moment of low rate, and none back and forth near a step\'s threshold', () => {
  const needed = kbpsNeeded(FULL);
  // Half a second below what the full picture needs: not a trend.
  const blip = run(new DegradationPolicy('balanced', FULL), 10, (ms) => (ms >= 5000 && ms < 5500 ? needed / 2 : 20_000));
  assert.deepEqual(pointsOf(blip), ['640x360@30']);
  // A rate that wobbles ±10 % around the full picture's need: one step down, never back up (the way up
  // needs 30 % more than the full picture needs).
  const policy = new DegradationPolicy('maintain-framerate', FULL);
  const wobble = run(policy, 60, (ms) => needed * (1 + 0.1 * Math.sin(ms / 700)));
  const changes = wobble.filter((t, i) => i > 0 && t.point !== wobble[i - 1].point);
  assert.equal(changes.length, 1, `changes: ${changes.map((t) => `${t.atMs} ms ${label(t.point)}`).join(', ')}`);
});

const available = await loadNodeAv();
const skip = 'error' in available ? `node-av did not load (${available.error}); npm ci installs it` : false;

test('the in-process encoder follows the policy from a keyframe on: a smaller size, or fewer frames', { skip }, async () => {
  for (const [preference, expected] of [['maintain-framerate', { width: 240, height: 136, share: 1 }],
    ['maintain-resolution', { width: 320, height: 180, share: 0.5 }]] as const) {
    const encoded: EncodedFrame[] = [];
    const full = { width: 320, height: 180, fps: 30 };
    const encoder = await LibavVideoEncoder.open({ encoder: 'libx264', ...full, bitrateKbps: 2000, keyframeIntervalFrames: 600, ffmpegPath: 'ffmpeg' },
      createLogger('silent'), (frame) => encoded.push(frame), (reason) => assert.fail(reason), new DegradationPolicy(preference, full));
    encoder.start();
    encoder.setBitrate(100); // below what 320x180@30 needs (121 kbit/s), enough for one step down
    const buffer = Buffer.alloc((full.width * full.height * 3) / 2, 128);
    // 3 s of a 30 fps source on the frame clock the encoder is given (capture times), the policy's hold included.
    const start = performance.now();
    let taken = 0;
    for (let frame = 1; frame <= 90; frame++) {
      const accepted = await new Promise<boolean>((resolve) => {
        if (!encoder.submit(buffer, frame, start + (frame * 1000) / 30, () => resolve(true))) resolve(false);
      });
      if (accepted && frame > 45) taken++;
    }
    const deadline = Date.now() + 20_000;
    while (encoded.length < encoder.stats.framesIn && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    encoder.stop();
    assert.deepEqual({ width: encoder.operatingPoint.width, height: encoder.operatingPoint.height }, { width: expected.width, height: expected.height }, preference);
    assert.equal(encoded.filter((frame) => frame.keyframe).length, 2, `${preference}: keyframes (the first, and the new context's first)`);
    // After the step (at about 1 s), frames 46-90: all of them, or every other one.
    assert.ok(Math.abs(taken - 45 * expected.share) <= 2, `${preference}: ${taken} of the last 45 frames encoded`);
  }
});
