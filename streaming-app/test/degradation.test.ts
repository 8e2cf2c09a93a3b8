// What gives way at low rates (STREAMING_DEGRADATION), on a simulated clock: the policy alone, fed the
// estimate every 100 ms as the transport-wide feedback would; then the in-process encoder following it
// for real (frames come out at the smaller size, or fewer of them).
import assert from 'node:assert/strict';
import { randomFillSync } from 'node:crypto';
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

test('balanced gives up size down to half first, then frame rate: at 1280x720@60 and 1 Mbit/s it keeps 60 fps', () => {
  const hd = { width: 1280, height: 720, fps: 60 };
  const down = (kbps: number): string[] => pointsOf(run(new DegradationPolicy('balanced', hd), 10, () => kbps).filter((t) => t.atMs < 10_000));
  assert.deepEqual(down(1000), ['1280x720@60', '960x540@60', '640x360@60']);
  assert.deepEqual(down(500), ['1280x720@60', '960x540@60', '640x360@60', '640x360@30']);
});

test('every preference goes as low as the rate needs, each down its own ladder, disabled nowhere', () => {
  const deep = (ms: number): number => (ms < 10_000 ? 150 : 20_000);
  const ladders: Record<Exclude<DegradationPreference, 'disabled'>, string[]> = {
    'maintain-framerate': ['640x360@30', '480x270@30', '320x180@30'],
    'maintain-resolution': ['640x360@30', '640x360@15', '640x360@10', '640x360@5'],
    balanced: ['640x360@30', '480x270@30', '320x180@30'],
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

test('with QP reports the picture decides: a simple one keeps its size at a low rate, a poor one steps down, and up again at twice the rate it was poor at', () => {
  /** As run(), with the encoder's QP of every frame (30 fps) as `qp(t)`. */
  const runWithQp = (policy: DegradationPolicy, seconds: number, kbps: (ms: number) => number, qp: (ms: number) => number) => {
    const timeline: { atMs: number; point: OperatingPoint }[] = [];
    for (let now = 0; now <= seconds * 1000; now += 100) {
      for (let frame = now - 100 + 100 / 3; frame <= now; frame += 100 / 3) policy.noteQp(qp(frame), frame);
      timeline.push({ atMs: now, point: policy.update(kbps(now), now) });
    }
    return timeline;
  };
  // 300 kbit/s, far below what 640x360@30 needs by bits per pixel, but a still desktop's QP stays at 20.
  assert.deepEqual(pointsOf(runWithQp(new DegradationPolicy('balanced', FULL), 20, () => 300, () => 20)), ['640x360@30']);
  // A noisy picture, poor (QP 41) from 10 s at 1 Mbit/s, more than the bits-per-pixel rule asks for; at
  // 480x270 the QP is 33. The rate climbs to 1.5 Mbit/s (not twice what 640x360 was poor at), then 2.
  const policy = new DegradationPolicy('maintain-framerate', FULL);
  const kbps = (ms: number): number => (ms < 20_000 ? 1000 : ms < 30_000 ? 1500 : 2000);
  const timeline = runWithQp(policy, 40, kbps, (ms) => (ms < 10_000 ? 30 : policy.point.width === 640 ? 41 : 33));
  assert.equal(at(timeline, 9900), '640x360@30');
  const downAt = timeline.find((t) => t.point.width < 640)!.atMs;
  // The mean QP of the last second passes 37 some 0.65 s after the change, then the step waits its second.
  assert.ok(downAt >= 11_500 && downAt <= 11_800, `down ${downAt - 10_000} ms after the picture turned poor`);
  assert.equal(at(timeline, 29_900), '480x270@30', 'not back up at 1.5 times the rate it was poor at');
  const upAt = timeline.find((t) => t.atMs > 30_000 && t.point.width === 640)?.atMs;
  assert.ok(upAt !== undefined && upAt - 30_000 <= 2100, `back up ${upAt === undefined ? 'never' : upAt - 30_000} ms after the rate doubled`);
});

const available = await loadNodeAv();
const skip = 'error' in available ? `node-av did not load (${available.error}); npm ci installs it` : false;

test('the in-process encoder follows the policy from a keyframe on: a smaller size, or fewer frames, for a noisy picture only', { skip }, async () => {
  // At 100 kbit/s libx264 reports a QP far above 37 (about 64) for fresh noise in every frame, 0 for a flat grey.
  for (const [preference, picture, expected] of [['maintain-framerate', 'noise', { width: 240, height: 136, share: 1 }],
    ['maintain-resolution', 'noise', { width: 320, height: 180, share: 0.5 }], ['maintain-framerate', 'flat', { width: 320, height: 180, share: 1 }]] as const) {
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
      // Noise until the first step, a flat grey after it (poor at any size, it would step on down).
      if (picture === 'noise' && encoder.operatingPoint.width === full.width && encoder.operatingPoint.fps === full.fps) randomFillSync(buffer);
      else buffer.fill(128);
      const accepted = await new Promise<boolean>((resolve) => {
        if (!encoder.submit(buffer, frame, start + (frame * 1000) / 30, () => resolve(true))) resolve(false);
      });
      if (accepted && frame > 45) taken++;
    }
    const deadline = Date.now() + 20_000;
    while (encoded.length < encoder.stats.framesIn && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    encoder.stop();
    const stepped = picture === 'noise';
    assert.deepEqual({ width: encoder.operatingPoint.width, height: encoder.operatingPoint.height }, { width: expected.width, height: expected.height }, `${preference}, ${picture}`);
    assert.equal(encoded.filter((frame) => frame.keyframe).length, stepped ? 2 : 1, `${preference}, ${picture}: keyframes (the first, and a new context's first)`);
    // After the step (at about 1.3 s), frames 46-90: all of them, or every other one.
    assert.ok(Math.abs(taken - 45 * expected.share) <= 2, `${preference}, ${picture}: ${taken} of the last 45 frames encoded`);
  }
});
