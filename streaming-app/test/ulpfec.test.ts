// Video FEC's bytes and its switch. FEC packets from ulpfec.ts are checked against the RFC 5109
// recovery procedure (§10.2), written out here on its own: each media packet a FEC packet protects,
// when lost, comes back bit for bit from the others and the FEC packet. The policy (fec-policy.ts) is
// fed seconds of loss counts.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { RtpHeader } from 'werift';
import { FecPolicy } from '../src/fec-policy.ts';
import { videoFecPayloadTypes } from '../src/peer.ts';
import { MAX_PROTECTED_PACKETS, protectionPlan, redPayload, ulpfecPayload } from '../src/ulpfec.ts';

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

type FecHeader = { longMask: boolean; base: number; protectionLength: number; protectedSeqs: number[]; levelPayload: Buffer; raw: Buffer };

function parseFec(fec: Buffer): FecHeader {
  assert.equal(fec[0] & 0x80, 0, 'E bit clear');
  const longMask = (fec[0] & 0x40) !== 0;
  const base = fec.readUInt16BE(2);
  const protectionLength = fec.readUInt16BE(10);
  const maskBytes = longMask ? 6 : 2;
  const protectedSeqs: number[] = [];
  for (let bit = 0; bit < maskBytes * 8; bit++) if (fec[12 + (bit >> 3)] & (0x80 >> (bit & 7))) protectedSeqs.push((base + bit) & 0xffff);
  return { longMask, base, protectionLength, protectedSeqs, levelPayload: fec.subarray(12 + maskBytes), raw: fec };
}

/**
 * RFC 5109 §10.2, one lost packet: XOR the received protected packets' bit strings (first 64 bits of the
 * header, the 16-bit length after the fixed header, everything after the fixed header) with the FEC
 * header's first 80 bits and the level 0 payload; the result gives P, X, CC, M, PT, the timestamp, the
 * length and the bytes; the sequence number comes from the mask and the SSRC from the FEC packet.
 */
function recover(fecPayload: Buffer, received: Buffer[], ssrc: number): Buffer {
  const fec = parseFec(fecPayload);
  const head = Buffer.from(fec.raw.subarray(0, 10));
  const body = Buffer.alloc(fec.protectionLength);
  fec.levelPayload.copy(body);
  for (const packet of received) {
    for (let i = 0; i < 8; i++) head[i] ^= packet[i];
    head.writeUInt16BE(head.readUInt16BE(8) ^ (packet.length - 12), 8);
    for (let i = 12; i < packet.length; i++) body[i - 12] ^= packet[i];
  }
  const receivedSeqs = new Set(received.map((p) => p.readUInt16BE(2)));
  const missing = fec.protectedSeqs.filter((seq) => !receivedSeqs.has(seq));
  assert.equal(missing.length, 1, 'exactly one protected packet missing');
  const length = head.readUInt16BE(8);
  const out = Buffer.alloc(12 + length);
  out[0] = 0x80 | (head[0] & 0x3f);
  out[1] = head[1];
  out.writeUInt16BE(missing[0], 2);
  head.copy(out, 4, 4, 8);
  out.writeUInt32BE(ssrc, 8);
  body.copy(out, 12, 0, length);
  return out;
}

describe('ULPFEC packets (RFC 5109)', () => {
  test('every packet a FEC packet protects comes back from the others by XOR, bit for bit', () => {
    // Different lengths (the last, the frame's end, is short and carries the marker), across the wrap of
    // the 16-bit sequence numbers.
    const packets = [65533, 65534, 65535, 0, 1].map((seq, i) => mediaPacket(seq, i === 4 ? 301 : 1160 - i * 17, i === 4));
    const fec = ulpfecPayload(packets);
    const header = parseFec(fec);
    assert.equal(header.longMask, false);
    assert.equal(header.base, 65533, 'the lowest sequence number, across the wrap');
    assert.deepEqual(header.protectedSeqs, [65533, 65534, 65535, 0, 1]);
    assert.equal(header.protectionLength, Math.max(...packets.map((p) => p.length)) - 12);
    assert.equal(fec.length, 10 + 4 + header.protectionLength);
    for (const [lost, original] of packets.entries()) {
      const rebuilt = recover(fec, packets.filter((_, i) => i !== lost), SSRC);
      assert.deepEqual(rebuilt, original, `packet ${lost} recovered`);
    }
  });

  test('a FEC packet over more than 16 packets takes the long mask; over 48, none', () => {
    const packets = Array.from({ length: 40 }, (_, i) => mediaPacket(1000 + i, 200 + i));
    const every3rd = packets.filter((_, i) => i % 3 === 1);
    const fec = ulpfecPayload(every3rd);
    const header = parseFec(fec);
    assert.equal(header.longMask, true);
    assert.equal(header.base, 1001);
    assert.deepEqual(header.protectedSeqs, every3rd.map((p) => p.readUInt16BE(2)));
    assert.deepEqual(recover(fec, every3rd.slice(1), SSRC), every3rd[0]);
    assert.deepEqual(recover(fec, every3rd.slice(0, -1), SSRC), every3rd.at(-1));
    assert.throws(() => ulpfecPayload([mediaPacket(0, 10), mediaPacket(MAX_PROTECTED_PACKETS, 10)]), /at most 48/);
  });

  test('RED with one block: F = 0 and the block\'s payload type, then the block', () => {
    const red = redPayload(101, Buffer.from([1, 2, 3]));
    assert.deepEqual([...red], [101, 1, 2, 3]);
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

  test('seconds with few packets say nothing', () => {
    const policy = new FecPolicy();
    for (let i = 0; i < 5; i++) assert.equal(policy.update(3, 40), 0, '3 of 40 lost');
  });
});

test('RED, ULPFEC and RED\'s RTX from an answer\'s video section (as Chromium 156 answers the offer)', () => {
  const answer = ['v=0', 'm=audio 9 UDP/TLS/RTP/SAVPF 96', 'a=rtpmap:96 opus/48000/2', 'a=rtpmap:63 red/48000/2',
    'm=video 9 UDP/TLS/RTP/SAVPF 97 98 99 100 101', 'a=rtpmap:97 H264/90000', 'a=rtpmap:98 rtx/90000', 'a=fmtp:98 apt=97',
    'a=rtpmap:99 red/90000', 'a=rtpmap:100 rtx/90000', 'a=fmtp:100 apt=99', 'a=rtpmap:101 ulpfec/90000', 'm=application 9 UDP/DTLS/SCTP webrtc-datachannel', ''].join('\r\n');
  assert.deepEqual(videoFecPayloadTypes(answer), { red: 99, ulpfec: 101, redRtx: 100 });
  assert.equal(videoFecPayloadTypes(answer.replace('a=rtpmap:101 ulpfec/90000\r\n', '')), undefined, 'RED without ULPFEC: no FEC');
  assert.deepEqual(videoFecPayloadTypes(answer.replace('a=fmtp:100 apt=99\r\n', '')), { red: 99, ulpfec: 101, redRtx: undefined });
});
