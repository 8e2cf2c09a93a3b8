// The lip-sync hold of the picture: halfway toward the gap per reading, never negative, never past its cap.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nextHold } from '../client/picture-hold.ts';

test('a picture ahead of the sound as heard is held back by half the gap per reading', () => {
  // The picture shows what was captured 80 ms after the sound now playing, which reaches the ear 40 ms later.
  const reading = { videoPlayoutMs: 1_000_080, audioPlayoutMs: 1_000_000, audioOutputMs: 40 };
  assert.equal(nextHold(0, reading), 60);
  assert.equal(nextHold(60, { ...reading, videoPlayoutMs: 1_000_020 }), 90);
});

test('a picture behind the sound is held less, and never less than not at all', () => {
  assert.equal(nextHold(100, { videoPlayoutMs: 1_000_000, audioPlayoutMs: 1_000_060, audioOutputMs: 20 }), 80);
  assert.equal(nextHold(10, { videoPlayoutMs: 1_000_000, audioPlayoutMs: 1_000_200, audioOutputMs: 0 }), 0);
});

test('a reading far off (a stall, a clock jump) cannot hold the picture past 400 ms', () => {
  assert.equal(nextHold(300, { videoPlayoutMs: 1_005_000, audioPlayoutMs: 1_000_000, audioOutputMs: 30 }), 400);
});
