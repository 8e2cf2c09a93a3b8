// One clock for every RTP stream of a session. Video and audio timestamps both come from the moment
// their media was captured, read on performance.now(); each sender's RTCP sender reports map those
// timestamps to wall-clock (NTP) time on that same clock, and the browser lines audio and video up by
// those reports. werift fills the reports with the send time of the last packet and a malformed NTP
// fraction, so the senders' report fields are set here after every packet.
import type { RTCRtpSender } from 'werift';

const NTP_EPOCH_OFFSET_MS = Date.UTC(1900, 0, 1);

/** 64-bit NTP time (seconds since 1900 . 32-bit fraction) of a performance.now() instant. */
export function ntpOf(perfMs: number): bigint {
  const ms = performance.timeOrigin + perfMs - NTP_EPOCH_OFFSET_MS;
  const seconds = Math.floor(ms / 1000);
  const fraction = Math.floor(((ms - seconds * 1000) / 1000) * 2 ** 32);
  return (BigInt(seconds) << 32n) | BigInt(fraction);
}

/** RTP timestamps for one stream: a random start (RFC 3550), then capture time in `clockRate` units. */
export class RtpClock {
  readonly #base: number;
  readonly #originMs: number;
  readonly #perMs: number;

  constructor(clockRate: number, originMs: number, base: number) {
    this.#perMs = clockRate / 1000;
    this.#originMs = originMs;
    this.#base = base;
  }

  timestamp(captureMs: number): number {
    return (this.#base + Math.round((captureMs - this.#originMs) * this.#perMs)) >>> 0;
  }
}

/** After a packet went out: the next sender report maps `rtpTimestamp` to the capture time. */
export function reportCaptureTime(sender: RTCRtpSender, captureMs: number, rtpTimestamp: number): void {
  // werift keeps these two fields private; they are exactly what its sender reports carry.
  Object.assign(sender, { ntpTimestamp: ntpOf(captureMs), rtpTimestamp });
}
