// Video FEC's bytes and its switch. FEC packets from flexfec.ts are read as FlexFEC's draft 03 lays out
// its header (as Chrome reads "flexfec-03") and recovered by XOR, written out here on its own: each
// media packet a FEC packet protects, when lost, comes back bit for bit from the others and the FEC
// packet. The policy (fec-policy.ts) is fed seconds of loss counts.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { RtpHeader } from 'werift';
import { FecPolicy } from '../src/fec-policy.ts';
import { flexfecPayload, MAX_PROTECTED_PACKETS, protectionPlan } from '../src/flexfec.ts';
import { flexfecPayloadType, withFecStream } from '../src/peer.ts';

const SSRC = 0x1234abcd;

/** A media packet as it leaves: H.264's payload type, header extensions (playout delay, transport-wide sequence), a payload of `length` bytes. */
function mediaPacket(sequenceNumber: number, length: number, marker = false): Buffer {
  const header = new RtpHeader({
    payloadType: 97, sequenceNumber, timestamp: 0xfffffff0, ssrc: SSRC, marker,
    extensions: [{ id: 3, payload: Buffer.from([sequenceNumber >> 8, sequenceNumber & 0xff]) }, { id: 6, payload: Buffer.from([0, 0, 0]) }],
  });
  const payload = Buffer.alloc(length, 0);
  for (let i = 0; i < length; i++) payload[i] = (sequenceNumber * 31 + i * 7) & 0xff;
  return Buffer.concat([header.serialize(header.serializeSize), payload]);
}

type FecHeader = { maskBytes: number; ssrc: number; base: number; protectedSeqs: number[]; protectionLength: number; raw: Buffer };

/**
 * Draft 03 with R = F = 0: recovery fields (8 bytes), SSRCCount (1) and 3 reserved bytes, the protected
 * SSRC, SN base, then the mask in parts of 15, 31 and 63 bits, each after a K bit that is set in the last.
 */
function parseFec(fec: Buffer): FecHeader {
  assert.equal(fec[0] & 0xc0, 0, 'R and F clear');
  assert.equal(fec[8], 1, 'one protected SSRC');
  assert.equal(fec.readUIntBE(9, 3), 0, 'reserved');
  const base = fec.readUInt16BE(16);
  const last = [0, 2, 6].findIndex((byte) => (fec[18 + byte] & 0x80) !== 0);
  assert.ok(last >= 0, 'a K bit ends the mask');
  const maskBytes = [2, 6, 14][last];
  // Bit positions in the mask bytes, K bits left out: 1-15, then 17-47, then 49-111.
  const positions = [...Array.from({ length: 15 }, (_, i) => i + 1), ...Array.from({ length: 31 }, (_, i) => i + 17), ...Array.from({ length: 63 }, (_, i) => i + 49)];
  const protectedSeqs: number[] = [];
  positions.forEach((position, offset) => {
    if (position < maskBytes * 8 && fec[18 + (position >> 3)] & (0x80 >> (position & 7))) protectedSeqs.push((base + offset) & 0xffff);
  });
  return { maskBytes, ssrc: fec.readUInt32BE(12), base, protectedSeqs, protectionLength: fec.length - 18 - maskBytes, raw: fec };
}

/**
 * One lost packet back: XOR the received protected packets' first two bytes, timestamp, length after the
 * fixed header and everything after the fixed header with the FEC header's recovery fields and payload;
 * the sequence number comes from the mask, the SSRC is the protected stream's.
 */
function recover(fecPayload: Buffer, received: Buffer[], ssrc: number): Buffer {
  const fec = parseFec(fecPayload);
  const head = Buffer.from(fec.raw.subarray(0, 8));
  const body = Buffer.from(fec.raw.subarray(18 + fec.maskBytes));
  for (const packet of received) {
    head[0] ^= packet[0];
    head[1] ^= packet[1];
    head.writeUInt16BE(head.readUInt16BE(2) ^ (packet.length - 12), 2);
    for (let i = 4; i < 8; i++) head[i] ^= packet[i];
    for (let i = 12; i < packet.length; i++) body[i - 12] ^= packet[i];
  }
  const receivedSeqs = new Set(received.map((p) => p.readUInt16BE(2)));
  const missing = fec.protectedSeqs.filter((seq) => !receivedSeqs.has(seq));
  assert.equal(missing.length, 1, 'exactly one protected packet missing');
  const length = head.readUInt16BE(2);
  const out = Buffer.alloc(12 + length);
  out[0] = 0x80 | (head[0] & 0x3f);
  out[1] = head[1];
  out.writeUInt16BE(missing[0], 2);
  head.copy(out, 4, 4, 8);
  assert.equal(fec.ssrc, ssrc, 'the protected stream');
  out.writeUInt32BE(fec.ssrc, 8);
  body.copy(out, 12, 0, length);
  return out;
}

describe('FlexFEC packets (draft 03, as Chrome reads them)', () => {
  test('every packet a FEC packet protects comes back from the others by XOR, bit for bit', () => {
    // Different lengths (the last, the frame's end, is short and carries the marker), across the wrap of
    // the 16-bit sequence numbers.
    const packets = [65533, 65534, 65535, 0, 1].map((seq, i) => mediaPacket(seq, i === 4 ? 301 : 1160 - i * 17, i === 4));
    const fec = flexfecPayload(SSRC, packets);
    const header = parseFec(fec);
    assert.equal(header.maskBytes, 2, 'five packets: the short mask');
    assert.equal(header.base, 65533, 'the lowest sequence number, across the wrap');
    assert.deepEqual(header.protectedSeqs, [65533, 65534, 65535, 0, 1]);
    assert.equal(header.protectionLength, Math.max(...packets.map((p) => p.length)) - 12, 'every packet protected whole');
    for (const [lost, original] of packets.entries()) {
      const rebuilt = recover(fec, packets.filter((_, i) => i !== lost), SSRC);
      assert.deepEqual(rebuilt, original, `packet ${lost} recovered`);
    }
  });

  test('the mask grows by its K bits: 15, 46, then 109 sequence numbers; past 48, none here', () => {
    const packets = Array.from({ length: 48 }, (_, i) => mediaPacket(1000 + i, 200 + i));
    for (const [members, maskBytes] of [[[0, 14], 2], [[0, 15], 6], [[3, 45], 6], [[0, 46], 14], [[0, 20, 47], 14]] as const) {
      const chosen = members.map((i) => packets[i]);
      const fec = flexfecPayload(SSRC, chosen);
      const header = parseFec(fec);
      assert.equal(header.maskBytes, maskBytes, `offsets ${members.join(', ')}`);
      assert.deepEqual(header.protectedSeqs, chosen.map((p) => p.readUInt16BE(2)));
      assert.deepEqual(recover(fec, chosen.slice(1), SSRC), chosen[0]);
      assert.deepEqual(recover(fec, chosen.slice(0, -1), SSRC), chosen.at(-1));
    }
    const every3rd = packets.filter((_, i) => i % 3 === 1);
    assert.deepEqual(parseFec(flexfecPayload(SSRC, every3rd)).protectedSeqs, every3rd.map((p) => p.readUInt16BE(2)));
    assert.throws(() => flexfecPayload(SSRC, [mediaPacket(0, 10), mediaPacket(MAX_PROTECTED_PACKETS, 10)]), /at most 48/);
  });

  test('a frame\'s packets each protected once, interleaved, in groups of at most 48', () => {
    for (const [count, ratio] of [[1, 0.1], [5, 0.1], [15, 0.15], [15, 0.5], [100, 0.2], [48, 0.3]]) {
      const plan = protectionPlan(count, ratio);
      const covered = plan.flat().sort((a, b) => a - b);
      assert.deepEqual(covered, Array.from({ length: count }, (_, i) => i), `${count} packets at ${ratio}: each once`);
      for (const members of plan) assert.ok(members.at(-1)! - members[0] < MAX_PROTECTED_PACKETS, 'within one mask');
      // About `ratio` FEC packets per media packet, at least one per group of 48.
      assert.ok(plan.length >= Math.ceil(count / MAX_PROTECTED_PACKETS) && plan.length <= Math.ceil(count * ratio) + 2, `${plan.length} FEC packets for ${count} at ${ratio}`);
    }
    // Consecutive packets go with different FEC packets: a burst of two losses is repaired.
    const plan = protectionPlan(15, 0.2);
    assert.equal(plan.length, 3);
    assert.deepEqual(plan[0], [0, 3, 6, 9, 12]);
    assert.deepEqual(plan[1], [1, 4, 7, 10, 13]);
  });
});

describe('the FEC switch', () => {
  const second = (policy: FecPolicy, loss: number, packets = 400) => policy.update(Math.round(loss * packets), packets);

  test('none on a clean link, nor for one lossy second; two switch it on, sized by the loss', () => {
    const policy = new FecPolicy();
    for (let i = 0; i < 20; i++) assert.equal(second(policy, 0.005), 0);
    assert.equal(second(policy, 0.05), 0, 'one lossy second can be chance');
    assert.equal(second(policy, 0.05), 0.15, 'three times 5 %');
    assert.equal(policy.on, true);
  });

  test('the ratio follows the worst of the last five seconds, between 10 and 50 %', () => {
    const policy = new FecPolicy();
    second(policy, 0.03);
    assert.equal(second(policy, 0.03), 0.1);
    assert.equal(second(policy, 0.1), 0.3);
    for (let i = 0; i < 4; i++) assert.equal(second(policy, 0.04), 0.3, 'the 10 % second is still among the last five');
    assert.equal(second(policy, 0.04), 0.1, '3 x 4 % = 12 %, in steps of 5 %');
    assert.equal(second(policy, 0.4), 0.5);
  });

  test('off again only after ten clean seconds in a row', () => {
    const policy = new FecPolicy();
    second(policy, 0.05);
    second(policy, 0.05);
    for (let i = 0; i < 9; i++) assert.ok(second(policy, 0) > 0);
    assert.ok(second(policy, 0.02) > 0, 'a second at 2 % is not clean');
    for (let i = 0; i < 9; i++) assert.ok(second(policy, 0.005) > 0);
    assert.equal(second(policy, 0.005), 0);
    assert.equal(policy.on, false);
  });

  test('seconds in which the bottleneck\'s queue built say nothing: their losses are congestion, not chance', () => {
    const policy = new FecPolicy();
    for (let i = 0; i < 5; i++) assert.equal(policy.update(40, 400, true), 0, '10 % lost while the queue built');
    assert.equal(second(policy, 0.05), 0);
    assert.equal(second(policy, 0.05), 0.15, 'two seconds of loss without a queue switch it on, sized by them alone');
  });

  test('a keyframe gets twice the ratio while the link loses packets, from its first lossy second on, none on a clean link', () => {
    const policy = new FecPolicy();
    assert.equal(policy.keyframeRatio(0, 400), 0, 'clean');
    assert.equal(policy.keyframeRatio(2, 400), 0, 'below 1 %');
    assert.equal(policy.keyframeRatio(40, 400), 0.5, 'FEC not on yet: twice 3 x 10 %, at most 50 %');
    assert.equal(policy.keyframeRatio(12, 400), 0.2, 'twice 3 x 3 %, in steps of 5 %');
    assert.equal(policy.keyframeRatio(3, 15), 0, 'too few packets to say');
    assert.equal(policy.keyframeRatio(40, 400, true), 0, 'not while the queue overflows');
    second(policy, 0.04);
    assert.equal(second(policy, 0.04), 0.1);
    assert.equal(policy.keyframeRatio(0, 400), 0.2, 'FEC on: twice its ratio, whatever the last second');
    assert.equal(policy.keyframeRatio(40, 400, true), 0.1, 'congested: the ratio of other frames');
  });

  test('seconds with few packets say nothing', () => {
    const policy = new FecPolicy();
    for (let i = 0; i < 5; i++) assert.equal(policy.update(3, 40), 0, '3 of 40 lost');
  });
});

test('the offer ties a FEC stream to the video\'s SSRC, and the answer\'s FlexFEC payload type is found (as Chromium 156 answers)', () => {
  const offer = ['v=0', 'm=video 9 UDP/TLS/RTP/SAVPF 97 98 99', 'a=ssrc-group:FID 1515590632 3854092649', 'a=ssrc:1515590632 cname:abc-1',
    'a=ssrc:3854092649 cname:abc-1', 'a=rtpmap:97 H264/90000', 'a=rtpmap:98 rtx/90000', 'a=fmtp:98 apt=97', 'a=rtpmap:99 flexfec-03/90000',
    'a=fmtp:99 repair-window=10000000', ''].join('\r\n');
  const tied = withFecStream(offer, 1515590632, 123456789);
  assert.match(tied, /\r\na=ssrc:3854092649 cname:abc-1\r\na=ssrc-group:FEC-FR 1515590632 123456789\r\na=ssrc:123456789 cname:abc-1\r\na=rtpmap:97 /,
    'after the video\'s own SSRC lines');
  assert.throws(() => withFecStream(offer, 42, 123456789), /no video SSRC/);
  const answer = ['v=0', 'm=audio 9 UDP/TLS/RTP/SAVPF 96', 'a=rtpmap:96 opus/48000/2',
    'm=video 9 UDP/TLS/RTP/SAVPF 97 98 99', 'a=rtpmap:97 H264/90000', 'a=rtpmap:98 rtx/90000', 'a=fmtp:98 apt=97',
    'a=rtpmap:99 flexfec-03/90000', 'a=fmtp:99 repair-window=10000000', 'm=application 9 UDP/DTLS/SCTP webrtc-datachannel', ''].join('\r\n');
  assert.equal(flexfecPayloadType(answer), 99);
  assert.equal(flexfecPayloadType(answer.replace('a=rtpmap:99 flexfec-03/90000\r\n', '')), undefined, 'declined: no FEC');
});
