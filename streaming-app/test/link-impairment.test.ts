// The emulator's per-packet decisions (link-impairment.ts), on a clock the test gives: delay within the
// jitter band, order kept, loss at its rate, and the same draws for the same seed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ImpairedDirection } from './link-impairment.ts';

const decisions = (direction: ImpairedDirection, packets: number, gapMs: number): (number | undefined)[] =>
  Array.from({ length: packets }, (_, i) => direction.schedule(i * gapMs));

test('a fixed delay with jitter: every packet within delay ± jitter of its arrival, unless order holds it a little longer', () => {
  const direction = new ImpairedDirection({ delayMs: 30, jitterMs: 5, loss: 0 }, 7);
  const departures = decisions(direction, 2000, 10) as number[];
  const delays = departures.map((d, i) => d - i * 10);
  // 10 ms apart with ±5 ms of jitter: no packet can overtake, so none is held back by its predecessor.
  assert.ok(delays.every((d) => d >= 25 && d <= 35), `delays from ${Math.min(...delays)} to ${Math.max(...delays)}`);
  const mean = delays.reduce((a, b) => a + b, 0) / delays.length;
  assert.ok(Math.abs(mean - 30) < 0.5, `mean delay ${mean}`);
  assert.ok(Math.max(...delays) - Math.min(...delays) > 9, 'the jitter spans its band');
  assert.equal(direction.dropped, 0);
});

test('packets leave in the order they came, even when their jitter would swap them', () => {
  const direction = new ImpairedDirection({ delayMs: 30, jitterMs: 20, loss: 0 }, 3);
  const departures = decisions(direction, 1000, 1) as number[];
  for (let i = 1; i < departures.length; i++) assert.ok(departures[i] >= departures[i - 1], `packet ${i} overtook ${i - 1}`);
  assert.ok(departures.every((d, i) => d - i >= 10), 'never earlier than delay - jitter');
});

test('loss at its rate, the same packets for the same seed, others for another', () => {
  const lost = (seed: number) => decisions(new ImpairedDirection({ delayMs: 0, jitterMs: 0, loss: 0.05 }, seed), 20_000, 1)
    .flatMap((d, i) => d === undefined ? [i] : []);
  const first = lost(42);
  assert.ok(first.length > 850 && first.length < 1150, `${first.length} of 20000 lost at 5 %`);
  assert.deepEqual(lost(42), first);
  assert.notDeepEqual(lost(43), first);
});

test('a change of impairment applies to the next packet; no loss means none lost', () => {
  const direction = new ImpairedDirection({ delayMs: 0, jitterMs: 0, loss: 0 }, 1);
  assert.ok(decisions(direction, 1000, 1).every((d, i) => d === i));
  direction.impairment = { delayMs: 50, jitterMs: 0, loss: 1 };
  assert.equal(direction.schedule(2000), undefined);
  direction.impairment = { delayMs: 50, jitterMs: 0, loss: 0 };
  assert.equal(direction.schedule(2001), 2051);
});

test('reseeding repeats the draws from the start: the same packets lost by number', () => {
  const direction = new ImpairedDirection({ delayMs: 10, jitterMs: 5, loss: 0.2 }, 9);
  const lostOf = (ds: (number | undefined)[]) => ds.flatMap((d, i) => d === undefined ? [i] : []);
  const first = lostOf(decisions(direction, 500, 3));
  direction.reseed(9);
  assert.deepEqual(lostOf(decisions(direction, 500, 3)), first);
});
