// The sequence numbers a Generic NACK (RFC 4585 §6.2.1) asks for. werift parses a feedback packet's FCIs
// up to the end of the whole compound RTCP datagram, not of the packet (its length field is ignored), so
// a NACK that Chrome sends in front of other RTCP packets comes with their bytes read as more FCIs: seen
// as hundreds of made-up sequence numbers a second at 5 % loss. Only the packet's own FCIs count here,
// found again in werift's list (each FCI is its PID followed by those of the next 16 its bitmask names,
// in ascending order; a sender starts a new FCI only past those 16), and numbers past 65535 wrap.
import type { GenericNack } from 'werift';

/** RTCP header length field (32-bit words after the first) minus the two SSRC words: the FCI count. */
const SSRC_WORDS = 2;

export function nackedSequenceNumbers(nack: GenericNack): number[] {
  const fciCount = Math.max(0, nack.header.length - SSRC_WORDS);
  const found: number[] = [];
  let fcis = 0;
  let pid = -Infinity;
  let previous = -Infinity;
  for (const value of nack.lost) {
    const sameFci = value > previous && value - pid >= 1 && value - pid <= 16;
    if (!sameFci) {
      if (fcis === fciCount) break;
      fcis++;
      pid = value;
    }
    previous = value;
    found.push(value & 0xffff);
  }
  return found;
}
