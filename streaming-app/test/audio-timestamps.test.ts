// RTP timestamps of the Opus stream: they count samples, one frame per packet, and follow the capture
// clock only where samples really went missing (every packet of a second late) or a new encoder began. ffmpeg's packets reach the app
// late now and then on a loaded host, though every sample was buffered by the sound server: a timestamp
// moved forward for that left a hole the browser concealed (126 concealments in 30 s at load 12).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RTCRtpSender, RtpPacket } from 'werift';
import { RtpAudioSender } from '../src/rtp.ts';
import { createLogger } from '../src/logger.ts';

/** A werift sender as far as RtpAudioSender uses it, keeping the timestamps it was given. */
function sender(timestamps: number[]): RTCRtpSender {
  return {
    codec: { payloadType: 111 }, ssrc: 1234,
    sendRtp: async (packet: RtpPacket) => { timestamps.push(packet.header.timestamp); },
  } as unknown as RTCRtpSender;
}

test('20 ms packets that come late keep exactly 960 samples apart; lost samples or a new encoder re-align', () => {
  const timestamps: number[] = [];
  const audio = new RtpAudioSender(sender(timestamps), createLogger('silent'), 0);
  const frame = (captureMs: number, durationMs = 20) => audio.send({ data: Buffer.alloc(10), captureMs, durationMs });
  // Every seventh packet 120 ms late, the others a few ms (ffmpeg on a loaded host): 3 s.
  for (let k = 0; k < 150; k++) frame(1000 + 20 * k + (k % 7 === 3 ? 120 : k % 5));
  const steps = timestamps.slice(1).map((t, i) => (t - timestamps[i]) >>> 0);
  assert.deepEqual([...new Set(steps)], [960], 'a late packet moves nothing');
  // 300 ms of samples lost: every packet from then on is 300 ms behind the count; within about a second
  // the count moves on by that much, once.
  for (let k = 150; k < 250; k++) frame(1000 + 20 * k + 300);
  const jumps = timestamps.slice(1).map((t, i) => (t - timestamps[i]) >>> 0).filter((step) => step !== 960);
  assert.deepEqual(jumps, [960 + 300 * 48], 'lost samples move the count on once');
  const before = timestamps.length;
  frame(1000 + 20 * 250 + 300 - 100, 5); // a new encoder whose first packet was captured earlier
  assert.equal((timestamps[before] - timestamps[before - 1]) >>> 0, ((20 - 100) * 48) >>> 0, 'an earlier capture re-aligns at once');
});
