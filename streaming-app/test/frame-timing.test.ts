// FrameTiming: a frame read in a callback is timed by the callback of its own frame.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FrameTiming } from '../client/frame-timing.ts';

const FRAME_S = 1 / 60;
const at = (n: number) => n * FRAME_S;
const read = (n: number, inputSeq: number) => ({ inputSeq, timestampUs: Math.round(at(n) * 1e6) });

test("a frame read in its own callback is timed by it, even when the seconds' float misses its microsecond", () => {
  const timing = new FrameTiming();
  assert.equal(timing.shown(8.073223, { inputSeq: 4, timestampUs: 8_073_223 }), 4);
});

test('a frame read a callback early waits for the callback of its own frame', () => {
  const timing = new FrameTiming();
  // Callback of frame 10, but the element already holds frame 11, the first to show input 7.
  assert.equal(timing.shown(at(10), read(11, 7)), undefined);
  // Callback of frame 11: input 7 is timed here; meanwhile the element holds frame 12.
  assert.equal(timing.shown(at(11), read(12, 7)), 7);
  assert.equal(timing.shown(at(12), read(12, 7)), 7);
});

test('a callback the browser skipped: the held frame is timed by the first callback past it', () => {
  const timing = new FrameTiming();
  assert.equal(timing.shown(at(10), read(11, 3)), undefined);
  assert.equal(timing.shown(at(12), read(13, 4)), 3);
  assert.equal(timing.shown(at(13), read(13, 4)), 4);
});

test('without timestamps (no WebCodecs) every frame is timed by the callback it was read in', () => {
  const timing = new FrameTiming();
  assert.equal(timing.shown(at(10), { inputSeq: 2, timestampUs: undefined }), 2);
  assert.equal(timing.shown(at(11), undefined), undefined);
});
