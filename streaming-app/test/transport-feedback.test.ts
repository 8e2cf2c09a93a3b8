// transportFeedbackResults on a feedback packet built byte by byte as Chrome sends them: a run-length
// chunk, a 1-bit status vector chunk with two losses, and a trailing run of one loss.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RtcpHeader, TransportWideCC } from 'werift';
import { transportFeedbackResults } from '../src/transport-feedback.ts';

test('numbers every packet from the base across run-length and status vector chunks, deltas in µs', () => {
  const vector = [1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1];
  const vectorBits = vector.reduce((bits, symbol) => (bits << 1) | symbol, 0b10);
  const body = Buffer.alloc(16);
  body.writeUInt32BE(1, 0); // sender SSRC
  body.writeUInt32BE(0, 4); // media SSRC: Chrome does not always name ours
  body.writeUInt16BE(65_530, 8); // base sequence number, wrapping past 65535 within the report
  body.writeUInt16BE(20, 10); // packet status count
  body.writeUIntBE(10, 12, 3); // reference time: 10 x 64 ms
  body.writeUInt8(7, 15);
  const chunks = Buffer.alloc(6);
  chunks.writeUInt16BE((0b01 << 13) | 5, 0); // run of 5, received with small delta
  chunks.writeUInt16BE(vectorBits, 2);
  chunks.writeUInt16BE(1, 4); // run of 1, not received
  const deltas = Buffer.alloc(17, 4); // 17 received, each 4 x 250 µs = 1 ms after the one before
  deltas[5] = 6; // 1.5 ms
  const data = Buffer.concat([body, chunks, deltas, Buffer.alloc(1)]);
  const feedback = TransportWideCC.deSerialize(data, new RtcpHeader({ type: 205, count: 15, length: data.length / 4 }));
  const results = transportFeedbackResults(feedback);
  assert.equal(results.length, 20);
  assert.deepEqual(results.map((r) => r.sequenceNumber).slice(0, 8), [65_530, 65_531, 65_532, 65_533, 65_534, 65_535, 0, 1]);
  assert.deepEqual(results.map((r) => (r.received ? 1 : 0)), [1, 1, 1, 1, 1, ...vector, 0]);
  assert.equal(results[0].receivedAtMs, 641);
  assert.equal(results[4].receivedAtMs, 645);
  assert.equal(results[5].receivedAtMs, 646.5, 'a delta of 1.5 ms is kept, not rounded down');
  assert.equal(results[7].receivedAtMs, 647.5, 'a lost packet has no delta');
  assert.equal(results[19].receivedAtMs, 0);
});
