// Video forward error correction as Chrome's receiver decodes it: ULPFEC packets (RFC 5109) carried in
// RED (RFC 2198) on the media stream's own SSRC and sequence numbers. A FEC packet is the XOR of the
// media packets it protects (their header fields and everything after the fixed 12-byte RTP header), so
// a receiver missing one of them rebuilds it from the others and the FEC packet, without a round trip.
// Pure byte arithmetic: rtp.ts decides what to protect and sends the results; test/ulpfec.test.ts
// recovers packets from them by the RFC's procedure.

/** RFC 5109 §7.3: a ULPFEC header, and the level 0 header with a 16-bit mask (L = 0) or a 48-bit one (L = 1). */
const FEC_HEADER_BYTES = 10;
const SHORT_MASK_PACKETS = 16;
/** The most media packets one FEC packet can name: the long mask's 48 bits. */
export const MAX_PROTECTED_PACKETS = 48;
const RTP_FIXED_HEADER_BYTES = 12;

/**
 * The FEC payload (FEC header, level 0 header, level 0 payload) protecting `packets`: media packets as
 * the receiver sees them (a RED-wrapped one with its block's payload type and payload, header
 * extensions as sent), all within MAX_PROTECTED_PACKETS sequence numbers of the lowest.
 */
export function ulpfecPayload(packets: Buffer[]): Buffer {
  if (packets.length === 0) throw new Error('ULPFEC needs at least one media packet');
  const sequenceNumbers = packets.map((p) => p.readUInt16BE(2));
  const base = sequenceNumbers.reduce((lowest, seq) => (((seq - lowest) & 0xffff) >= 0x8000 ? seq : lowest));
  const offsets = sequenceNumbers.map((seq) => (seq - base) & 0xffff);
  const span = Math.max(...offsets) + 1;
  if (span > MAX_PROTECTED_PACKETS) throw new Error(`ULPFEC protects at most ${MAX_PROTECTED_PACKETS} consecutive packets (got a span of ${span})`);
  const longMask = span > SHORT_MASK_PACKETS;
  const maskBytes = longMask ? 6 : 2;
  const protectionLength = Math.max(...packets.map((p) => p.length - RTP_FIXED_HEADER_BYTES));
  const headerBytes = FEC_HEADER_BYTES + 2 + maskBytes;
  const out = Buffer.alloc(headerBytes + protectionLength);
  let lengthRecovery = 0;
  for (const [index, packet] of packets.entries()) {
    // P, X, CC of the first byte; M and PT of the second; the timestamp: XORed as they are (§7.3).
    out[0] ^= packet[0] & 0x3f;
    out[1] ^= packet[1];
    for (let i = 4; i < 8; i++) out[i] ^= packet[i];
    lengthRecovery ^= packet.length - RTP_FIXED_HEADER_BYTES;
    for (let i = RTP_FIXED_HEADER_BYTES; i < packet.length; i++) out[headerBytes + i - RTP_FIXED_HEADER_BYTES] ^= packet[i];
    const bit = offsets[index];
    out[FEC_HEADER_BYTES + 2 + (bit >> 3)] |= 0x80 >> (bit & 7);
  }
  // E = 0 (no extension of the header), L as the span needs.
  if (longMask) out[0] |= 0x40;
  out.writeUInt16BE(base, 2);
  out.writeUInt16BE(lengthRecovery, 8);
  out.writeUInt16BE(protectionLength, FEC_HEADER_BYTES);
  return out;
}

/** RFC 2198 with one block, the primary: F = 0 and the block's payload type, then the block itself. */
export function redPayload(blockPayloadType: number, block: Buffer): Buffer {
  return Buffer.concat([Buffer.of(blockPayloadType & 0x7f), block]);
}

/**
 * Which of a frame's `mediaCount` packets each of its FEC packets protects (indices into the frame), for
 * a protection ratio (FEC packets per media packet). Interleaved (media i goes with FEC i mod m) so that
 * a burst of consecutive losses falls on different FEC packets, in groups of at most
 * MAX_PROTECTED_PACKETS consecutive media packets (a keyframe is larger than that).
 */
export function protectionPlan(mediaCount: number, ratio: number): number[][] {
  const plan: number[][] = [];
  for (let start = 0; start < mediaCount; start += MAX_PROTECTED_PACKETS) {
    const count = Math.min(MAX_PROTECTED_PACKETS, mediaCount - start);
    const fecCount = Math.min(count, Math.max(1, Math.round(count * ratio)));
    for (let j = 0; j < fecCount; j++) {
      const members: number[] = [];
      for (let i = j; i < count; i += fecCount) members.push(start + i);
      plan.push(members);
    }
  }
  return plan;
}
