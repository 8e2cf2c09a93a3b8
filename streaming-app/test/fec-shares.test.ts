// FecShares: which lost packets the receiver rebuilds from a frame's FEC packets, from the losses and the
// FEC packets' fates the sender is told of (NACKs, transport-wide feedback).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FecShares } from '../src/fec-shares.ts';

test('one loss in a share is rebuilt unless its FEC packet is lost; two are not', () => {
  const shares = new FecShares();
  // A frame of 6 packets (RTP 100-105) under two FEC packets, interleaved; they left as transport-wide 7 and 8.
  const even = shares.add([100, 102, 104]);
  const odd = shares.add([101, 103, 105]);
  shares.fecSent(even, 7);
  shares.fecSent(odd, 8);
  assert.equal(shares.rebuilds(100), false, 'nothing known lost yet');
  assert.deepEqual(shares.lost(100), []);
  assert.equal(shares.rebuilds(100), true, 'the only loss of its share, its FEC packet on the way');
  assert.equal(shares.rebuilds(100, true), false, 'not known to have arrived yet');
  assert.deepEqual(shares.fecReported(7, true), []);
  assert.equal(shares.rebuilds(100, true), true, 'its FEC packet arrived');
  shares.lost(104);
  assert.equal(shares.rebuilds(100), false, 'a second loss in the share: neither is rebuilt');
  assert.equal(shares.rebuilds(104), false);
  shares.lost(103);
  assert.deepEqual(shares.fecReported(8, false), []);
  assert.equal(shares.rebuilds(103), false, 'its FEC packet was lost');
  assert.equal(shares.fecReported(9, true), undefined, 'a media packet\'s number: not a FEC packet');
  assert.equal(shares.rebuilds(999), false, 'a packet no FEC protects');
});

test('a copy left to FEC is owed again once its share turns out not to rebuild it', () => {
  const shares = new FecShares();
  const share = shares.add([10, 12, 14]);
  shares.add([11, 13, 15]);
  shares.fecSent(share, 40);
  shares.lost(10);
  shares.leftOut(10);
  assert.deepEqual(shares.lost(11), [], 'a loss in the other share');
  assert.deepEqual(shares.lost(10), [], 'asked again: nothing new');
  assert.deepEqual(shares.lost(14), [10], 'a second loss in its share, reported later: the copy of 10 is owed');
  assert.deepEqual(shares.lost(12), [], 'owed once');
  // Its FEC packet lost: the same.
  const other = shares.add([20, 22]);
  shares.fecSent(other, 41);
  shares.lost(20);
  shares.leftOut(20);
  assert.deepEqual(shares.fecReported(41, false), [20]);
});

test('a packet out of the history is forgotten', () => {
  const shares = new FecShares();
  shares.add([5, 6]);
  shares.lost(5);
  assert.equal(shares.rebuilds(5), true);
  shares.forget(5);
  assert.equal(shares.rebuilds(5), false);
});
