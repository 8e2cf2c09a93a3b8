// PacketPacer on a simulated clock: a keyframe leaves spread over time at the pacing rate, an idle spell
// does not turn into a burst, and a long queue drains within its bound.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PacketPacer } from '../src/pacer.ts';

function pacerOnClock(rateKbps: number): { pacer: PacketPacer<number>; sent: { atMs: number; bytes: number }[]; clock: { ms: number } } {
  const clock = { ms: 1000 };
  const sent: { atMs: number; bytes: number }[] = [];
  const pacer = new PacketPacer<number>(rateKbps, { send: (bytes) => sent.push({ atMs: clock.ms, bytes }), sizeOf: (bytes) => bytes, timer: false, now: () => clock.ms });
  return { pacer, sent, clock };
}

const run = (pacer: PacketPacer<number>, clock: { ms: number }, untilMs: number): void => {
  while (clock.ms < untilMs) {
    clock.ms += 2;
    pacer.process(clock.ms);
  }
};

test('a 40 KB keyframe at 5 Mbit/s leaves over about 64 ms, never more than 5 ms of budget at once', () => {
  const { pacer, sent, clock } = pacerOnClock(5000);
  pacer.enqueue(Array.from({ length: 34 }, () => 1200));
  const firstBurst = sent.reduce((sum, p) => sum + p.bytes, 0);
  assert.ok(firstBurst <= 5 * 625 + 1200, `first burst ${firstBurst} bytes`);
  run(pacer, clock, 1200);
  assert.equal(sent.length, 34);
  const spanMs = sent.at(-1)!.atMs - sent[0].atMs;
  assert.ok(spanMs >= 55 && spanMs <= 75, `spread over ${spanMs} ms`);
  for (let t = 1000; t < 1100; t += 10) {
    const bytes = sent.filter((p) => p.atMs >= t && p.atMs < t + 10).reduce((sum, p) => sum + p.bytes, 0);
    assert.ok(bytes <= 10 * 625 + 2 * 1200, `${bytes} bytes in 10 ms at ${t}`);
  }
});

test('after an idle second the next frame is paced, not sent at once', () => {
  const { pacer, sent, clock } = pacerOnClock(2000);
  run(pacer, clock, 2000);
  pacer.enqueue(Array.from({ length: 20 }, () => 1200));
  assert.ok(sent.length <= 2, `${sent.length} packets at once`);
  run(pacer, clock, 2200);
  assert.equal(sent.length, 20);
});

test('a queue longer than 150 ms at the pacing rate drains within about 150 ms', () => {
  const { pacer, sent, clock } = pacerOnClock(1000);
  pacer.enqueue(Array.from({ length: 200 }, () => 1200));
  assert.ok(pacer.maxQueueMs > 1000);
  run(pacer, clock, 1400);
  assert.equal(sent.length, 200);
  assert.ok(sent.at(-1)!.atMs - 1000 <= 200, `drained after ${sent.at(-1)!.atMs - 1000} ms`);
  assert.equal(pacer.queuedPackets, 0);
});
