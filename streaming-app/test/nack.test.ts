// nackedSequenceNumbers against werift's own parse of real compound RTCP datagrams.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GenericNack, RtcpPacketConverter, RtcpRrPacket, RtcpTransportLayerFeedback, RtcpReceiverInfo } from 'werift';
import { nackedSequenceNumbers } from '../src/nack.ts';

function parsed(lost: number[], followedBy: Buffer[]): GenericNack {
  const nack = new RtcpTransportLayerFeedback({ feedback: new GenericNack({ senderSsrc: 1, mediaSourceSsrc: 2, lost }) });
  const [first] = RtcpPacketConverter.deSerialize(Buffer.concat([nack.serialize(), ...followedBy]));
  assert.ok(first instanceof RtcpTransportLayerFeedback && first.feedback instanceof GenericNack);
  return first.feedback;
}

const receiverReport = (): Buffer => new RtcpRrPacket({
  ssrc: 1,
  reports: [new RtcpReceiverInfo({ ssrc: 2, fractionLost: 3, packetsLost: 40, highestSequence: 70_000, jitter: 5, lsr: 123456, dlsr: 789 })],
}).serialize();

test('a NACK alone: its numbers, several FCIs', () => {
  const lost = [100, 101, 105, 116, 200, 300, 301];
  assert.deepEqual(nackedSequenceNumbers(parsed(lost, [])), lost);
});

test('a NACK in front of a receiver report: werift reads the report as more FCIs, these are left out', () => {
  const nack = parsed([500, 502, 900], [receiverReport(), receiverReport()]);
  assert.ok(nack.lost.length > 3, `werift's list has the report's bytes in it: ${nack.lost.length} numbers`);
  assert.deepEqual(nackedSequenceNumbers(nack), [500, 502, 900]);
});

/** A NACK datagram as a sender packs it: one FCI per (PID, bitmask). */
function rawNack(fcis: [number, number][]): Buffer {
  const buffer = Buffer.alloc(12 + 4 * fcis.length);
  buffer.writeUInt8(0x80 | 1, 0); // V=2, FMT=1 (Generic NACK)
  buffer.writeUInt8(205, 1); // RTPFB
  buffer.writeUInt16BE(2 + fcis.length, 2);
  buffer.writeUInt32BE(1, 4);
  buffer.writeUInt32BE(2, 8);
  fcis.forEach(([pid, blp], i) => { buffer.writeUInt16BE(pid, 12 + 4 * i); buffer.writeUInt16BE(blp, 14 + 4 * i); });
  return buffer;
}

test('numbers past 65535 wrap to the start (one FCI across the wrap)', () => {
  // PID 65534 with bits 0, 1 and 2: 65535, 0 and 1; then PID 7.
  const [packet] = RtcpPacketConverter.deSerialize(Buffer.concat([rawNack([[65534, 0b111], [7, 0]]), receiverReport()]));
  assert.ok(packet instanceof RtcpTransportLayerFeedback && packet.feedback instanceof GenericNack);
  assert.deepEqual(nackedSequenceNumbers(packet.feedback), [65534, 65535, 0, 1, 7]);
});
