// Video forward error correction as Chrome's receiver decodes it for H.264: FlexFEC on a stream of its
// own SSRC, in the header layout of draft-ietf-payload-flexible-fec-scheme-03 that Chrome reads for
// "flexfec-03" (one protected SSRC in the header, and a K bit set where the mask ends; RFC 8627 moved
// both, and Chrome 156 discards such a packet as "protecting multiple SSRCs"). A FEC packet is the XOR of
// the media packets it protects (their header fields and everything after the fixed 12-byte RTP header),
// so a receiver missing one of them rebuilds it from the others and the FEC packet, without a round trip.
// ULPFEC in RED (RFC 5109), which Chrome decodes too, shares the media's sequence numbers, and for H.264
// Chrome's receiver wants every one of them before it shows the next frame: a FEC packet lost, or one
// it forgot (it keeps them for 100 sequence numbers) while a frame waited for a retransmission, froze the
// picture until a keyframe (see docs/streaming-app.md). Pure byte arithmetic: rtp.ts decides what to
// protect and sends the results; test/flexfec.test.ts recovers packets from them by XOR.

/**
 * P, X, CC, M, PT recovery, length recovery, TS recovery (8 bytes), SSRCCount = 1 and 3 reserved bytes,
 * the protected SSRC; then SN base and the mask.
 */
const BASE_HEADER_BYTES = 16;
/** The mask's three sizes (with their K bits): offsets 0-14, 0-45, 0-108 from SN base. */
const MASK_BYTES = [2, 6, 14];
const MASK_SPANS = [15, 46, 109];
/** The most media packets one FEC packet covers here: a frame is cut into groups of at most this many. */
export const MAX_PROTECTED_PACKETS = 48;
const RTP_FIXED_HEADER_BYTES = 12;

/** Where the mask bit of a packet `offset` sequence numbers after SN base sits, past the K bits before it. */
function maskBit(offset: number): number {
  return offset + 1 + MASK_SPANS.filter((span) => offset >= span).length;
}

/**
 * The FlexFEC payload protecting `packets` of the stream `ssrc`: media packets as the receiver takes them
 * into its decoder (header extensions written after FEC is computed, the transport-wide sequence number,
 * zeroed), all within MAX_PROTECTED_PACKETS sequence numbers of the lowest. The FEC packet's RTP header
 * (its own SSRC, sequence number and payload type) is the sender's.
 */
export function flexfecPayload(ssrc: number, packets: Buffer[]): Buffer {
  if (packets.length === 0) throw new Error('FlexFEC needs at least one media packet');
  const sequenceNumbers = packets.map((p) => p.readUInt16BE(2));
  const base = sequenceNumbers.reduce((lowest, seq) => (((seq - lowest) & 0xffff) >= 0x8000 ? seq : lowest));
  const offsets = sequenceNumbers.map((seq) => (seq - base) & 0xffff);
  const span = Math.max(...offsets) + 1;
  if (span > MAX_PROTECTED_PACKETS) throw new Error(`FlexFEC protects at most ${MAX_PROTECTED_PACKETS} consecutive packets here (got a span of ${span})`);
  const size = MASK_SPANS.findIndex((s) => span <= s);
  const headerBytes = BASE_HEADER_BYTES + 2 + MASK_BYTES[size];
  const protectionLength = Math.max(...packets.map((p) => p.length - RTP_FIXED_HEADER_BYTES));
  const out = Buffer.alloc(headerBytes + protectionLength);
  let lengthRecovery = 0;
  for (const [index, packet] of packets.entries()) {
    // P, X, CC of the first byte (R = F = 0: a retransmission-free, flexible-mask packet); M and PT of
    // the second; the timestamp: XORed as they are.
    out[0] ^= packet[0] & 0x3f;
    out[1] ^= packet[1];
    for (let i = 4; i < 8; i++) out[i] ^= packet[i];
    lengthRecovery ^= packet.length - RTP_FIXED_HEADER_BYTES;
    for (let i = RTP_FIXED_HEADER_BYTES; i < packet.length; i++) out[headerBytes + i - RTP_FIXED_HEADER_BYTES] ^= packet[i];
    const bit = maskBit(offsets[index]);
    out[BASE_HEADER_BYTES + 2 + (bit >> 3)] |= 0x80 >> (bit & 7);
  }
  out.writeUInt16BE(lengthRecovery, 2);
  out[8] = 1; // SSRCCount; the 3 bytes after it are reserved, zero
  out.writeUInt32BE(ssrc, 12);
  out.writeUInt16BE(base, BASE_HEADER_BYTES);
  // The K bit of the mask's last part is set: at bit 0 of its first, third or seventh byte.
  out[BASE_HEADER_BYTES + 2 + [0, 2, 6][size]] |= 0x80;
  return out;
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
