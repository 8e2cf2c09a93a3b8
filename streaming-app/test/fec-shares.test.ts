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
  shares.lost(100);
  assert.equal(shares.rebuilds(100), true, 'the only loss of its share, its FEC packet on the way');
  assert.equal(shares.rebuilds(100, true), false, 'not known to have arrived yet');
  assert.equal(shares.fecReported(7, true), true);
  assert.equal(shares.rebuilds(100, true), true, 'its FEC packet arrived');
  shares.lost(104);
  assert.equal(shares.rebuilds(100), false, 'a second loss in the share: neither is rebuilt');
  assert.equal(shares.rebuilds(104), false);
  shares.lost(103);
  assert.equal(shares.fecReported(8, false), true);
  assert.equal(shares.rebuilds(103), false, 'its FEC packet was lost');
  assert.equal(shares.fecReported(9, true), false, 'a media packet\'s number: not a FEC packet');
  assert.equal(shares.rebuilds(999), false, 'a packet no FEC protects');
});

test('a packet out of the history is forgotten', () => {
  const shares = new FecShares();
  shares.add([5, 6]);
  shares.lost(5);
  assert.equal(shares.rebuilds(5), true);
  shares.forget(5);
  assert.equal(shares.rebuilds(5), false);
});
