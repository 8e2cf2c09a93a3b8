// Encoded frames to RTP on the negotiated video sender. Packetization is werift's (RFC 6184 mode 1 for
// H.264: single NAL, STAP-A for SPS+PPS, FU-A; RFC 7741 for VP8); this file adds timing and the
// negotiated payload type.
import { randomInt } from 'node:crypto';
import { H264Packetizer, Vp8Packetizer, type RTCRtpSender, type RtpPacket } from 'werift';
import type { EncodedFrame, VideoCodec } from './encoder.ts';
import type { Logger } from './logger.ts';

/** Leaves room for SRTP, the RTP header and header extensions inside a 1280-byte path MTU. */
const MAX_PAYLOAD_BYTES = 1160;
const VIDEO_CLOCK_HZ = 90_000;
/** playout-delay payload: 12-bit minimum and 12-bit maximum delay, both 0. */
const ZERO_PLAYOUT_DELAY = Buffer.from([0, 0, 0]);

export class RtpVideoSender {
  readonly #sender: RTCRtpSender;
  readonly #packetizer: { packetize(data: Buffer, timestamp: number): RtpPacket[] };
  readonly #log: Logger;
  /** Random start, as RFC 3550 asks; then the capture clock in 90 kHz units. */
  readonly #timestampBase = randomInt(0, 2 ** 31);
  readonly #clockOriginMs = performance.now();
  packetsSent = 0;
  bytesSent = 0;
  framesSent = 0;

  readonly #playoutDelayExtensionId: number | undefined;

  constructor(codec: VideoCodec, sender: RTCRtpSender, log: Logger, playoutDelayExtensionId?: number) {
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
    const timestamp = (this.#timestampBase + Math.round((frame.captureMs - this.#clockOriginMs) * (VIDEO_CLOCK_HZ / 1000))) >>> 0;
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
    this.framesSent++;
  }
}
