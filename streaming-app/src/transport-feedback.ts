// Per-packet results of a transport-wide congestion control feedback (draft-holmer-rmcat-transport-wide-
// cc-extensions-01 §3.1), from werift's parse of the chunks and deltas. werift's own `packetResults`
// reads only run-length chunks, each from the base sequence number, and rounds every delta down to a
// millisecond; status vector chunks (what Chrome sends for mixed runs) come out misnumbered. So the
// chunks are walked here: one status per sequence number from the base, a receive delta per received one.
import { RunLengthChunk, StatusVectorChunk, type TransportWideCC } from 'werift';
import type { PacketFeedback } from './congestion.ts';

/** Status codes: 0 not received, 1 received (small delta), 2 received (large or negative delta). */
function statuses(feedback: TransportWideCC): number[] {
  const all: number[] = [];
  for (const chunk of feedback.packetChunks) {
    if (chunk instanceof RunLengthChunk) {
      for (let i = 0; i < chunk.runLength; i++) all.push(chunk.packetStatus);
    } else if (chunk instanceof StatusVectorChunk) {
      all.push(...chunk.symbolList);
    }
  }
  return all.slice(0, feedback.packetStatusCount);
}

export function transportFeedbackResults(feedback: TransportWideCC): PacketFeedback[] {
  const results: PacketFeedback[] = [];
  // The reference time counts 64 ms steps; deltas are µs (multiples of 250) from the previous packet.
  let receivedAtMs = feedback.referenceTime * 64;
  let delta = 0;
  statuses(feedback).forEach((status, index) => {
    const sequenceNumber = (feedback.baseSequenceNumber + index) & 0xffff;
    const received = status === 1 || status === 2;
    if (received) {
      const recv = feedback.recvDeltas[delta++];
      if (!recv) return;
      receivedAtMs += recv.delta / 1000;
    }
    results.push({ sequenceNumber, received, receivedAtMs: received ? receivedAtMs : 0 });
  });
  return results;
}
