// RTP timestamps of the Opus stream: they count samples, one frame per packet, and follow the capture
// clock only where samples really went missing or a new encoder began. ffmpeg's packets reach the app
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

test('20 ms packets that come up to half a second late keep exactly 960 samples apart; a stall or a new encoder re-aligns', () => {
  const timestamps: number[] = [];
  const audio = new RtpAudioSender(sender(timestamps), createLogger('silent'), 0);
  const frame = (captureMs: number, durationMs = 20) => audio.send({ data: Buffer.alloc(10), captureMs, durationMs });
  for (let k = 0; k < 50; k++) frame(1000 + 20 * k + (k % 7 === 3 ? 120 : k % 5));
  const steps = timestamps.slice(1).map((t, i) => (t - timestamps[i]) >>> 0);
  assert.deepEqual([...new Set(steps)], [960], 'a late packet moves nothing');
  frame(1000 + 20 * 50 + 800); // 0.8 s without packets: the capture stalled
  assert.equal((timestamps[50] - timestamps[49]) >>> 0, (820 * 48) >>> 0, 'a stall re-aligns with the capture clock');
  frame(1000 + 20 * 51 + 800 - 100, 5); // a new encoder whose first packet was captured earlier
  assert.equal((timestamps[51] - timestamps[50]) >>> 0, ((20 - 100) * 48) >>> 0, 'an earlier capture re-aligns too');
});
