// Encoded media to RTP on the negotiated senders. Video packetization is werift's (RFC 6184 mode 1 for
// H.264: single NAL, STAP-A for SPS+PPS, FU-A; RFC 7741 for VP8); an Opus packet is one RTP packet
// (RFC 7587). This file adds timing (media-clock.ts) and the negotiated payload types.
import { randomInt } from 'node:crypto';
import { H264Packetizer, RtpHeader, RtpPacket, Vp8Packetizer, type RTCRtpSender } from 'werift';
import { AUDIO_CLOCK_HZ, AUDIO_FRAME_MS, type EncodedAudio } from './audio.ts';
import type { EncodedFrame, VideoCodec } from './encoder.ts';
import type { Logger } from './logger.ts';
import { reportCaptureTime, RtpClock } from './media-clock.ts';

/** Leaves room for SRTP, the RTP header and header extensions inside a 1280-byte path MTU. */
const MAX_PAYLOAD_BYTES = 1160;
const VIDEO_CLOCK_HZ = 90_000;
/** playout-delay payload: 12-bit minimum and 12-bit maximum delay, both 0. */
const ZERO_PLAYOUT_DELAY = Buffer.from([0, 0, 0]);

export class RtpVideoSender {
  readonly #sender: RTCRtpSender;
  readonly #packetizer: { packetize(data: Buffer, timestamp: number): RtpPacket[] };
  readonly #log: Logger;
  readonly #clock: RtpClock;
  packetsSent = 0;
  bytesSent = 0;
  framesSent = 0;

  readonly #playoutDelayExtensionId: number | undefined;

  constructor(codec: VideoCodec, sender: RTCRtpSender, log: Logger, clockOriginMs: number, playoutDelayExtensionId?: number) {
    this.#clock = new RtpClock(VIDEO_CLOCK_HZ, clockOriginMs, randomInt(0, 2 ** 31));
    this.#playoutDelayExtensionId = playoutDelayExtensionId;
    this.#sender = sender;
    this.#log = log;
    // The payload type the browser accepted in its answer; werift also enforces it on the way out.
    const payloadType = sender.codec?.payloadType;
    if (payloadType === undefined) throw new Error('video sender has no negotiated codec');
    const common = { payloadType, ssrc: sender.ssrc, maxPayloadSize: MAX_PAYLOAD_BYTES };
    this.#packetizer = codec === 'H264'
      ? new H264Packetizer({ ...common, inputFormat: 'length-prefixed', naluLengthSize: 4 })
      : new Vp8Packetizer(common);
  }

  send(frame: EncodedFrame): void {
    // Timestamps follow the moment the frame was rendered, so the receiver's jitter estimate sees the
    // real frame pacing rather than the encoder's output jitter.
    const timestamp = this.#clock.timestamp(frame.captureMs);
    const packets = this.#packetizer.packetize(frame.data, timestamp);
    const extensionId = this.#playoutDelayExtensionId;
    for (const packet of packets) {
      // Every packet carries it, so that a receiver joining mid-stream or losing packets still sees it.
      if (extensionId !== undefined) packet.header.extensions.push({ id: extensionId, payload: ZERO_PLAYOUT_DELAY });
      this.packetsSent++;
      this.bytesSent += packet.payload.length;
      this.#sender.sendRtp(packet).catch((error: unknown) => {
        this.#log.debug({ err: error }, 'rtp send failed');
      });
    }
    reportCaptureTime(this.#sender, frame.captureMs, timestamp);
    this.framesSent++;
  }
}

/** More apart than this, the packet count and the capture clock are re-aligned (a capture hiccup). */
const AUDIO_RESYNC_MS = 40;

/**
 * Opus packets to RTP. Timestamps advance by exactly one frame per packet, anchored to the capture clock
 * (arrival times jitter by a few ms, the samples do not).
 */
export class RtpAudioSender {
  readonly #sender: RTCRtpSender;
  readonly #log: Logger;
  readonly #clock: RtpClock;
  readonly #payloadType: number;
  #sequence = randomInt(0, 2 ** 16);
  #anchor: { captureMs: number; packets: number } | undefined;
  packetsSent = 0;

  constructor(sender: RTCRtpSender, log: Logger, clockOriginMs: number) {
    this.#sender = sender;
    this.#log = log;
    this.#clock = new RtpClock(AUDIO_CLOCK_HZ, clockOriginMs, randomInt(0, 2 ** 31));
    const payloadType = sender.codec?.payloadType;
    if (payloadType === undefined) throw new Error('audio sender has no negotiated codec');
    this.#payloadType = payloadType;
  }

  send(audio: EncodedAudio): void {
    let anchor = this.#anchor;
    const expectedMs = anchor ? anchor.captureMs + (this.packetsSent - anchor.packets) * AUDIO_FRAME_MS : audio.captureMs;
    if (!anchor || Math.abs(expectedMs - audio.captureMs) > AUDIO_RESYNC_MS) {
      anchor = this.#anchor = { captureMs: audio.captureMs, packets: this.packetsSent };
    }
    const captureMs = anchor.captureMs + (this.packetsSent - anchor.packets) * AUDIO_FRAME_MS;
    const timestamp = this.#clock.timestamp(captureMs);
    const header = new RtpHeader({ payloadType: this.#payloadType, sequenceNumber: this.#sequence, timestamp, ssrc: this.#sender.ssrc, marker: false });
    this.#sequence = (this.#sequence + 1) & 0xffff;
    this.#sender.sendRtp(new RtpPacket(header, audio.data)).catch((error: unknown) => this.#log.debug({ err: error }, 'audio rtp send failed'));
    reportCaptureTime(this.#sender, captureMs, timestamp);
    this.packetsSent++;
  }
}
