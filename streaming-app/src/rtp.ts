// Encoded media to RTP on the negotiated senders. Video packetization is werift's (RFC 6184 mode 1 for
// H.264: single NAL, STAP-A for SPS+PPS, FU-A; RFC 7741 for VP8); an Opus packet is one RTP packet
// (RFC 7587). This file adds timing (media-clock.ts), the negotiated payload types, and for video the
// pacing (pacer.ts), the bandwidth estimate from the receiver's feedback (congestion.ts), a second of
// retransmission history, and on a lossy link FEC (FlexFEC on its own SSRC: flexfec.ts, fec-policy.ts).
import { randomInt } from 'node:crypto';
import {
  H264Packetizer, ReceiverEstimatedMaxBitrate, RTP_EXTENSION_URI, RtcpPayloadSpecificFeedback, RtcpTransportLayerFeedback, RtpHeader, RtpPacket,
  serializeTransportWideCC, TransportWideCC, Vp8Packetizer, wrapRtx, type RtcpPacket, type RTCRtpSender,
} from 'werift';
import { AUDIO_CLOCK_HZ, type EncodedAudio } from './audio.ts';
import type { EncodedFrame, VideoCodec } from './encoder.ts';
import type { Logger } from './logger.ts';
import { BandwidthEstimator, type CongestionSettings } from './congestion.ts';
import { FecPolicy } from './fec-policy.ts';
import { FecShares, type FecShare } from './fec-shares.ts';
import { reportCaptureTime, RtpClock } from './media-clock.ts';
import { nackedSequenceNumbers } from './nack.ts';
import { PACING_FACTOR, PacketPacer } from './pacer.ts';
import { queueBuilds, RetransmissionGate } from './retransmission.ts';
import { transportFeedbackResults } from './transport-feedback.ts';
import { flexfecPayload, protectionPlan } from './flexfec.ts';

/** Leaves room for SRTP, the RTP header and header extensions inside a 1280-byte path MTU. */
const MAX_PAYLOAD_BYTES = 1160;
const VIDEO_CLOCK_HZ = 90_000;
/** playout-delay payload: 12-bit minimum and 12-bit maximum delay, both 0. */
const ZERO_PLAYOUT_DELAY = Buffer.from([0, 0, 0]);

/** About a second of video at the highest rate: what NACKs can still repair (werift keeps 128 packets, and its cache is emptied: this file answers NACKs). */
const RETRANSMIT_HISTORY_MS = 1000;
/**
 * A keyframe that repairs what retransmission will not is sent once the bottleneck's queue is about
 * empty (a keyframe into a full queue is lost as well), or after this long at the latest.
 */
const RECOVERY_MAX_WAIT_MS = 1000;
const RECOVERY_QUEUE_MS = 40;
/**
 * A packet the transport-wide feedback reports lost and no NACK has asked for this long after is resent
 * anyway: the NACK itself was lost on the way back (the receiver asks again only after its own idea of a
 * round trip, 100 ms when it has none: long enough for a freeze).
 */
const UNASKED_WAIT_MS = 20;
/** A second copy of a retransmission on a lossy link leaves this much after the first (loss comes in bursts). */
const SECOND_COPY_DELAY_MS = 5;
/** A packet whose retransmissions keep getting lost is left to the receiver's NACKs after this many resent on the feedback. */
const MAX_LOST_COPIES_RESENT = 2;
/** How often the FEC policy is given the last second's loss. */
const FEC_CHECK_MS = 1000;
/** A frame that reaches the sender this long after its capture, or finds the pacer this far behind, is logged (debug). */
const LATE_FRAME_MS = 50;
/** A FEC packet's bytes beyond the largest media packet it protects: its RTP header and extension, FlexFEC's header. */
const FEC_PACKET_OVERHEAD = 12 + 8 + 32;

/** Video FEC as the answer accepted it: FlexFEC's payload type, and the SSRC the offer gave its stream. */
export type VideoFec = { payloadType: number; ssrc: number };

/**
 * A frame's packets while FEC protects them: each media packet as the receiver takes it into its FEC
 * decoder (recorded as it leaves), and which of them each FEC packet protects.
 */
type FecGroup = { plan: number[][]; shares: FecShare[]; wires: (Buffer | undefined)[]; timestamp: number; maxPayload: number };
/** What the pacer sends: a media packet, or one of a frame's FEC packets (after the frame's media). */
type Outgoing =
  | { kind: 'media'; packet: RtpPacket; group?: FecGroup; index: number }
  | { kind: 'fec'; group: FecGroup; index: number };

export type VideoRate = CongestionSettings & {
  /** The answer accepted transport-wide feedback: estimate and follow the link. Otherwise send maxKbps. */
  transportCc: boolean;
  onTargetKbps: (kbps: number) => void;
  /** Lost packets this side will not send again (too old, or over the retransmission budget): a keyframe repairs them. */
  onUnrepairable: (reason: string) => void;
};

/** The werift sender's fields this file reads or writes beyond its public API (kept private in its types). */
type WeriftSenderInternals = {
  rtpCache: (RtpPacket | undefined)[];
  headerExtensions: { id: number; uri: string }[];
  octetCount: number;
  packetCount: number;
  rtxPayloadType?: number;
  rtxSequenceNumber: number;
  readonly rtxSsrc: number;
  dtlsTransport: RTCRtpSender['dtlsTransport'] & { transportSequenceNumber: number };
};

export class RtpVideoSender {
  readonly #sender: RTCRtpSender;
  readonly #internals: WeriftSenderInternals;
  readonly #packetizer: { packetize(data: Buffer, timestamp: number): RtpPacket[] };
  readonly #log: Logger;
  readonly #clock: RtpClock;
  readonly #pacer: PacketPacer<Outgoing>;
  readonly #rate: VideoRate;
  readonly estimator: BandwidthEstimator | undefined;
  readonly #history = new Map<number, { packet: RtpPacket; sentMs: number; lastSentMs: number; lostCopiesResent?: number }>();
  readonly retransmissions = new RetransmissionGate();
  #unsubscribe: (() => void) | undefined;
  #recovery: { reason: string; sinceMs: number } | undefined;
  /**
   * What each transport-wide sequence number carried: a video packet's RTP sequence number + 1, a
   * retransmission's the same negated, 0 an FEC packet.
   */
  readonly #byTransportSeq = new Int32Array(1 << 16);
  /** Lost packets resent without a NACK (#resendUnasked). */
  resentUnasked = 0;
  /** Retransmissions the feedback reported lost, sent again without waiting for the receiver's next NACK. */
  resentLost = 0;
  /** Which lost packets FEC rebuilds: no second copy for them, nor a resend unasked. */
  readonly #fecShares = new FecShares();
  /** Retransmissions (second copies, unasked resends) left out because FEC rebuilds the packet, less those owed again and sent. */
  leftToFec = 0;
  #lastEncoderKbps: number;
  #loggedKbps: number;
  readonly #fec: { stream: VideoFec; policy: FecPolicy; ratio: number; checkedMs: number; nextSequence: number } | undefined;
  packetsSent = 0;
  bytesSent = 0;
  framesSent = 0;
  fecPacketsSent = 0;
  fecBytesSent = 0;

  readonly #playoutDelayExtensionId: number | undefined;

  constructor(codec: VideoCodec, sender: RTCRtpSender, log: Logger, clockOriginMs: number, rate: VideoRate, playoutDelayExtensionId?: number,
    fec?: VideoFec) {
    this.#clock = new RtpClock(VIDEO_CLOCK_HZ, clockOriginMs, randomInt(0, 2 ** 31));
    this.#playoutDelayExtensionId = playoutDelayExtensionId;
    this.#sender = sender;
    this.#internals = sender as unknown as WeriftSenderInternals;
    this.#log = log;
    this.#rate = rate;
    // The payload type the browser accepted in its answer; werift also enforces it on the way out.
    const payloadType = sender.codec?.payloadType;
    if (payloadType === undefined) throw new Error('video sender has no negotiated codec');
    const common = { payloadType, ssrc: sender.ssrc, maxPayloadSize: MAX_PAYLOAD_BYTES };
    this.#packetizer = codec === 'H264'
      ? new H264Packetizer({ ...common, inputFormat: 'length-prefixed', naluLengthSize: 4 })
      : new Vp8Packetizer(common);
    this.estimator = rate.transportCc ? new BandwidthEstimator(rate) : undefined;
    // FEC is sized by the loss the transport-wide feedback reports: without it, none.
    this.#fec = fec && this.estimator
      ? { stream: fec, policy: new FecPolicy(), ratio: 0, checkedMs: performance.now(), nextSequence: randomInt(0, 2 ** 16) }
      : undefined;
    this.#lastEncoderKbps = this.encoderKbps;
    this.#loggedKbps = this.targetKbps;
    this.#pacer = new PacketPacer<Outgoing>(PACING_FACTOR * this.targetKbps, {
      send: (item) => this.#transmit(item),
      sizeOf: (item) => (item.kind === 'media' ? item.packet.payload.length + 12 : item.group.maxPayload + FEC_PACKET_OVERHEAD),
    });
    // Transport-wide feedback names whatever media SSRC the browser picks (Chrome: not always ours), which
    // werift's router then drops; it is taken from the transport itself. REMB is routed to the sender.
    const transportRtcp = sender.dtlsTransport.onRtcp.subscribe((packet) => this.#onRtcp(packet, 'transport'));
    const rtcp = sender.onRtcp.subscribe((packet) => this.#onRtcp(packet, 'sender'));
    const nack = sender.onGenericNack.subscribe((feedback) => this.#onNack(nackedSequenceNumbers(feedback)));
    this.#unsubscribe = () => {
      transportRtcp.unSubscribe();
      rtcp.unSubscribe();
      nack.unSubscribe();
    };
  }

  /** The rate the link should carry now (media, FEC and retransmissions), kbit/s. */
  get targetKbps(): number {
    return this.estimator?.targetKbps ?? this.#rate.maxKbps;
  }

  /** The rate the encoder should produce now: the target less what FEC adds to it. */
  get encoderKbps(): number {
    return Math.round(this.targetKbps / (1 + this.fecRatio));
  }

  /** FEC packets per media packet now (0: none, a clean link). */
  get fecRatio(): number {
    return this.#fec?.ratio ?? 0;
  }

  /** A keyframe's FEC ratio: more than other frames' while the link loses packets (fec-policy.ts). */
  #keyframeFecRatio(): number {
    if (!this.#fec || !this.estimator) return 0;
    const now = performance.now();
    const { lost, packets } = this.estimator.recentLoss(now);
    return this.#fec.policy.keyframeRatio(lost, packets, this.estimator.queueBuiltWithin(now, FEC_CHECK_MS));
  }

  get pacer(): PacketPacer<Outgoing> {
    return this.#pacer;
  }

  send(frame: EncodedFrame): void {
    // Timestamps follow the moment the frame was rendered, so the receiver's jitter estimate sees the
    // real frame pacing rather than the encoder's output jitter.
    const timestamp = this.#clock.timestamp(frame.captureMs);
    const packets = this.#packetizer.packetize(frame.data, timestamp);
    const extensionId = this.#playoutDelayExtensionId;
    // Every packet carries it, so that a receiver joining mid-stream or losing packets still sees it.
    if (extensionId !== undefined) for (const packet of packets) packet.header.extensions.push({ id: extensionId, payload: ZERO_PLAYOUT_DELAY });
    const lateMs = performance.now() - frame.captureMs;
    // For bench/stream/network.ts --trace: where a frame's time went when it leaves late.
    if (lateMs > LATE_FRAME_MS || this.#pacer.queuedMs > LATE_FRAME_MS) {
      this.#log.debug({ lateMs: Math.round(lateMs), encodeMs: Math.round(frame.encodeMs), pacerQueueMs: Math.round(this.#pacer.queuedMs) }, 'frame late');
    }
    const ratio = frame.keyframe ? this.#keyframeFecRatio() : this.fecRatio;
    if (frame.keyframe) this.#log.debug({ packets: packets.length, bytes: frame.data.length, fecRatio: ratio }, 'keyframe sent');
    this.#pacer.enqueue(this.#withFec(packets, timestamp, ratio));
    reportCaptureTime(this.#sender, frame.captureMs, timestamp);
    this.framesSent++;
  }

  /**
   * A frame's packets for the pacer, followed by its FEC packets while the link is lossy. A FEC packet is
   * built when its turn comes, from the media packets as they left: the pacer keeps the order.
   */
  #withFec(packets: RtpPacket[], timestamp: number, ratio: number): Outgoing[] {
    if (ratio === 0) return packets.map((packet, index) => ({ kind: 'media', packet, index }));
    const plan = protectionPlan(packets.length, ratio);
    const shares = plan.map((members) => this.#fecShares.add(members.map((i) => packets[i].header.sequenceNumber)));
    const group: FecGroup = { plan, shares, wires: [], timestamp, maxPayload: Math.max(...packets.map((p) => p.payload.length)) };
    return [
      ...packets.map((packet, index): Outgoing => ({ kind: 'media', packet, group, index })),
      ...plan.map((_, index): Outgoing => ({ kind: 'fec', group, index })),
    ];
  }

  #transmit(item: Outgoing): void {
    const now = performance.now();
    if (item.kind === 'fec') {
      this.#transmitFec(item.group, item.index, now);
      return;
    }
    const { packet, group } = item;
    this.packetsSent++;
    this.bytesSent += packet.payload.length;
    let transportSeq: number;
    if (group) {
      // Sent here rather than by werift, so that the bytes its FEC packets protect are known.
      const sent = this.#sendOwn(packet.header, packet.payload);
      group.wires[item.index] = Buffer.concat([sent.protectedHeader, packet.payload]);
      transportSeq = sent.transportSeq;
      this.#internals.octetCount += packet.payload.length;
      this.#internals.packetCount = (this.#internals.packetCount + 1) >>> 0;
    } else {
      this.#sender.sendRtp(packet).catch((error: unknown) => {
        this.#log.debug({ err: error }, 'rtp send failed');
      });
      // werift would answer NACKs from its own cache, every one at once; this file answers them all (#onNack).
      this.#internals.rtpCache.length = 0;
      // werift stamps the transport-wide sequence number synchronously, before its first await.
      transportSeq = this.#internals.dtlsTransport.transportSequenceNumber & 0xffff;
    }
    this.#sent(packet, transportSeq, now);
  }

  /** Bookkeeping of a packet that left: the estimator's, the transport-wide number's, the history's. */
  #sent(packet: RtpPacket, transportSeq: number, now: number): void {
    this.#byTransportSeq[transportSeq] = packet.header.sequenceNumber + 1;
    if (this.estimator) this.estimator.packetSent(transportSeq, packet.payload.length + 40, now);
    this.#remember(packet, now);
  }

  /**
   * One of a frame's FEC packets, on the FEC stream (its own SSRC and sequence numbers), from the media
   * packets of the frame that it protects. Counted by the estimator like any packet; never resent (the
   * receiver asks for media packets only).
   */
  #transmitFec(group: FecGroup, index: number, now: number): void {
    const fec = this.#fec;
    const wires = group.plan[index].map((i) => group.wires[i]).filter((w): w is Buffer => w !== undefined);
    if (!fec || wires.length === 0) return;
    const payload = flexfecPayload(this.#sender.ssrc, wires);
    const header = new RtpHeader({ payloadType: fec.stream.payloadType, sequenceNumber: fec.nextSequence, timestamp: group.timestamp, ssrc: fec.stream.ssrc, marker: false });
    fec.nextSequence = (fec.nextSequence + 1) & 0xffff;
    const { transportSeq } = this.#sendOwn(header, payload);
    this.fecPacketsSent++;
    this.fecBytesSent += payload.length;
    this.#byTransportSeq[transportSeq] = 0; // no media packet behind this number
    this.#fecShares.fecSent(group.shares[index], transportSeq);
    this.estimator?.packetSent(transportSeq, payload.length + 40, now);
  }

  /**
   * Sends a packet past werift's sender, with the transport-wide sequence number stamped as werift does.
   * Returns that number, and the header serialized as FEC protects it: with the transport-wide sequence
   * number zeroed, as Chrome's FEC decoder zeroes it in what it receives (libwebrtc counts it among the
   * header extensions written after FEC is computed, with abs-send-time and the transmission offset,
   * which this app does not send).
   */
  #sendOwn(original: RtpHeader, payload: Buffer): { transportSeq: number; protectedHeader: Buffer } {
    const werift = this.#internals;
    const transport = werift.dtlsTransport;
    const transportCc = werift.headerExtensions.find((e) => e.uri === RTP_EXTENSION_URI.transportWideCC);
    const stamp = transportCc && { id: transportCc.id, payload: Buffer.alloc(2) };
    const extensions = [...original.extensions, ...(stamp ? [stamp] : [])].sort((a, b) => a.id - b.id);
    const header = new RtpHeader({ ...original, extensions });
    const protectedHeader = header.serialize(header.serializeSize);
    if (stamp) {
      transport.transportSequenceNumber = (transport.transportSequenceNumber + 1) & 0xffff;
      stamp.payload = serializeTransportWideCC(transport.transportSequenceNumber);
    }
    transport.sendRtp(payload, header).catch((error: unknown) => this.#log.debug({ err: error }, 'rtp send failed'));
    return { transportSeq: transport.transportSequenceNumber & 0xffff, protectedHeader };
  }

  #remember(packet: RtpPacket, now: number): void {
    this.#history.set(packet.header.sequenceNumber, { packet, sentMs: now, lastSentMs: now });
    for (const [seq, entry] of this.#history) {
      if (now - entry.sentMs <= RETRANSMIT_HISTORY_MS) break;
      this.#history.delete(seq);
      this.#fecShares.forget(seq);
    }
  }

  #onRtcp(packet: RtcpPacket, from: 'transport' | 'sender'): void {
    const estimator = this.estimator;
    if (!estimator) return;
    if (from === 'transport' && packet instanceof RtcpTransportLayerFeedback && packet.feedback instanceof TransportWideCC) {
      const results = transportFeedbackResults(packet.feedback);
      estimator.feedback(results, performance.now());
      const owed: number[] = [];
      const media = results.filter((r) => {
        const owedByFec = this.#fecShares.fecReported(r.sequenceNumber & 0xffff, r.received);
        owed.push(...owedByFec ?? []);
        return owedByFec === undefined;
      });
      this.#resendOwed(owed);
      const carried = (received: boolean) => media.filter((r) => r.received === received).map((r) => this.#byTransportSeq[r.sequenceNumber & 0xffff]);
      const lost = carried(false);
      this.#resendUnasked(lost.filter((v) => v > 0).map((v) => v - 1));
      this.#resendLostCopies(lost.filter((v) => v < 0).map((v) => -v - 1), carried(true).filter((v) => v < 0).map((v) => -v - 1));
    } else if (from === 'sender' && packet instanceof RtcpPayloadSpecificFeedback && packet.feedback instanceof ReceiverEstimatedMaxBitrate) {
      estimator.remb(Number(packet.feedback.bitrate));
    } else {
      return;
    }
    this.#recoverWhenDrained(estimator);
    this.#adaptFec(estimator);
    const target = estimator.targetKbps;
    this.#pacer.rateKbps = PACING_FACTOR * target;
    const encoderKbps = this.encoderKbps;
    if (encoderKbps !== this.#lastEncoderKbps) {
      this.#lastEncoderKbps = encoderKbps;
      this.#rate.onTargetKbps(encoderKbps);
    }
    this.#logRate(target, estimator);
  }

  /** Once a second, the FEC policy's ratio for the loss of the last second (logged when it changes). */
  #adaptFec(estimator: BandwidthEstimator): void {
    const fec = this.#fec;
    const now = performance.now();
    if (!fec || now - fec.checkedMs < FEC_CHECK_MS) return;
    fec.checkedMs = now;
    const { lost, packets } = estimator.recentLoss(now);
    const ratio = fec.policy.update(lost, packets, estimator.queueBuiltWithin(now, FEC_CHECK_MS));
    if (ratio === fec.ratio) return;
    this.#log.info({ ratio, was: fec.ratio, loss: packets ? Math.round((lost / packets) * 1000) / 1000 : 0, packets }, 'video fec');
    fec.ratio = ratio;
  }

  /** A line per change of a tenth or more, so a log shows how the rate followed the link. */
  #logRate(target: number, estimator: BandwidthEstimator): void {
    if (Math.abs(target - this.#loggedKbps) < this.#loggedKbps * 0.1) return;
    this.#loggedKbps = target;
    const now = performance.now();
    this.#log.debug({ targetKbps: target, encoderKbps: this.encoderKbps, fecRatio: this.fecRatio, ackedKbps: Math.round(estimator.ackedKbps), loss: Math.round(estimator.lossFraction(now) * 1000) / 1000,
      usage: estimator.usage, ...estimator.detector, overuses: estimator.overuseEvents, lossBackoffs: estimator.lossBackoffs, pacerQueueMs: Math.round(this.#pacer.queuedMs) }, 'video rate');
  }

  /**
   * NACKed packets from a second of history, over RTX when negotiated, through the retransmission gate
   * (not a copy still in flight, within a budget). What it refuses for the budget, or no longer holds, is
   * left to a keyframe.
   */
  #onNack(lost: number[]): void {
    const now = performance.now();
    let unrepairable: string | undefined;
    const verdicts: string[] = [];
    for (const seq of lost) {
      const entry = this.#history.get(seq);
      if (!entry) {
        unrepairable = 'nacked packet no longer in history';
        verdicts.push(`${seq} gone`);
        continue;
      }
      this.#resendOwed(this.#fecShares.lost(seq));
      const verdict = this.retransmissions.decide(entry.packet.payload.length + 40, entry.lastSentMs, now, this.estimator?.queueDelayMs ?? 0, this.targetKbps);
      verdicts.push(`${seq} ${verdict} ${Math.round(now - entry.sentMs)}ms`);
      if (verdict === 'over budget') unrepairable = 'retransmission budget spent';
      if (verdict !== 'send') continue;
      entry.lastSentMs = now;
      this.#resend(entry.packet);
      // The second copy insures against a lost first one; FEC insures it already (until it turns out not to).
      if (this.#fecShares.rebuilds(seq)) {
        this.#fecShares.leftOut(seq);
        this.leftToFec++;
        continue;
      }
      const loss = this.estimator?.lossFraction(now) ?? 0;
      if (this.retransmissions.secondCopy(entry.packet.payload.length + 40, now, this.estimator?.queueDelayMs ?? 0, this.targetKbps, loss)) {
        setTimeout(() => { if (this.#unsubscribe) this.#resend(entry.packet); }, SECOND_COPY_DELAY_MS);
      }
    }
    this.#log.debug({ verdicts }, 'nack');
    if (unrepairable && !this.estimator) this.#rate.onUnrepairable(unrepairable);
    else if (unrepairable) this.#recovery ??= { reason: unrepairable, sinceMs: now };
  }

  /** Lost packets (by RTP sequence number) that no NACK asks for within UNASKED_WAIT_MS go again, through the gate. */
  #resendUnasked(lost: number[]): void {
    if (lost.length === 0) return;
    for (const seq of lost) this.#resendOwed(this.#fecShares.lost(seq));
    setTimeout(() => {
      if (!this.#unsubscribe) return;
      const now = performance.now();
      for (const seq of lost) {
        const entry = this.#history.get(seq);
        if (!entry || entry.lastSentMs !== entry.sentMs) continue; // gone, or a NACK came
        if (this.#fecShares.rebuilds(seq, true)) {
          this.#fecShares.leftOut(seq);
          this.leftToFec++;
          continue;
        }
        if (this.retransmissions.decide(entry.packet.payload.length + 40, entry.lastSentMs, now, this.estimator?.queueDelayMs ?? 0, this.targetKbps) !== 'send') continue;
        entry.lastSentMs = now;
        this.resentUnasked++;
        this.#resend(entry.packet);
      }
    }, UNASKED_WAIT_MS);
  }

  /**
   * A retransmission the feedback reports lost goes again at once (twice at most, through the gate),
   * unless another copy of the packet is reported to have arrived. The receiver would ask again only after
   * its own idea of the round trip: Chrome, receiving only, has none and asked again 200-350 ms later at
   * 10 % loss, long enough for a freeze. Not while a queue builds: that loss is the queue overflowing, and
   * another copy would add to it (at a 20 → 2 Mbit/s drop the estimate fell below 400 kbit/s).
   */
  #resendLostCopies(lost: number[], arrivedCopies: number[]): void {
    if (lost.length === 0 || queueBuilds(this.estimator?.queueDelayMs ?? 0)) return;
    const arrived = new Set(arrivedCopies);
    const now = performance.now();
    for (const seq of new Set(lost)) {
      const entry = this.#history.get(seq);
      if (!entry || arrived.has(seq) || (entry.lostCopiesResent ?? 0) >= MAX_LOST_COPIES_RESENT) continue;
      if (this.retransmissions.decide(entry.packet.payload.length + 40, entry.lastSentMs, now, this.estimator?.queueDelayMs ?? 0, this.targetKbps) !== 'send') continue;
      entry.lastSentMs = now;
      entry.lostCopiesResent = (entry.lostCopiesResent ?? 0) + 1;
      this.resentLost++;
      this.#resend(entry.packet);
    }
  }

  /** Copies left to FEC whose share turned out not to rebuild them (fec-shares.ts), within the retransmission budget. */
  #resendOwed(owed: number[]): void {
    const now = performance.now();
    for (const seq of owed) {
      const entry = this.#history.get(seq);
      if (!entry || !this.retransmissions.secondCopy(entry.packet.payload.length + 40, now, this.estimator?.queueDelayMs ?? 0, this.targetKbps, this.estimator?.lossFraction(now) ?? 0)) continue;
      entry.lastSentMs = now;
      this.leftToFec--;
      this.#resend(entry.packet);
    }
  }

  /**
   * One retransmission, over RTX when negotiated, with a transport-wide sequence number as libwebrtc gives
   * its own, so that the feedback says whether it arrived (#resendLostCopies). The estimator does not count
   * it: a lost copy is the same chance loss a second time, not a sign of a worse link.
   */
  #resend(original: RtpPacket): void {
    const werift = this.#internals;
    let packet = original;
    if (werift.rtxPayloadType !== undefined) {
      packet = wrapRtx(packet, werift.rtxPayloadType, werift.rtxSequenceNumber, werift.rtxSsrc);
      werift.rtxSequenceNumber = (werift.rtxSequenceNumber + 1) & 0xffff;
    }
    const { transportSeq } = this.#sendOwn(packet.header, packet.payload);
    this.#byTransportSeq[transportSeq] = -(original.header.sequenceNumber + 1);
  }

  #recoverWhenDrained(estimator: BandwidthEstimator): void {
    const recovery = this.#recovery;
    if (!recovery) return;
    if (estimator.queueDelayMs > RECOVERY_QUEUE_MS && performance.now() - recovery.sinceMs < RECOVERY_MAX_WAIT_MS) return;
    this.#recovery = undefined;
    this.#rate.onUnrepairable(recovery.reason);
  }

  close(): void {
    this.#pacer.stop();
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    this.#history.clear();
  }
}

/**
 * Where the count of samples and the capture clock part by more than this, the count is re-aligned: at
 * once when a packet was captured earlier than the count says (a new encoder, with another frame length
 * and start-up delay); when packets come later, only if even the earliest of a second's packets was that
 * late (samples were lost). ffmpeg delivers late now and then on a loaded host, every sample buffered by
 * the sound server: moving the timestamps forward for that left holes the browser concealed (at load 12,
 * 126 concealments in 30 s of 20 ms frames on a clean link).
 */
const AUDIO_RESYNC_MS = 40;
const LATENESS_WINDOW_MS = 1000;

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
  /** Capture time the next packet continues from: one frame after the last. */
  #nextMs: number | undefined;
  /** The least lateness of the packets since `sinceMs` (capture clock). */
  #lateness = { sinceMs: -Infinity, leastMs: Infinity };
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
    const captureMs = this.#alignedCaptureMs(audio.captureMs);
    this.#nextMs = captureMs + audio.durationMs;
    const timestamp = this.#clock.timestamp(captureMs);
    const header = new RtpHeader({ payloadType: this.#payloadType, sequenceNumber: this.#sequence, timestamp, ssrc: this.#sender.ssrc, marker: false });
    this.#sequence = (this.#sequence + 1) & 0xffff;
    this.#sender.sendRtp(new RtpPacket(header, audio.data)).catch((error: unknown) => this.#log.debug({ err: error }, 'audio rtp send failed'));
    reportCaptureTime(this.#sender, captureMs, timestamp);
    this.packetsSent++;
  }

  /** The packet's place on the capture clock: one frame after the last, unless the two have parted (AUDIO_RESYNC_MS). */
  #alignedCaptureMs(arrivedCaptureMs: number): number {
    const expectedMs = this.#nextMs ?? arrivedCaptureMs;
    const lateMs = arrivedCaptureMs - expectedMs;
    const window = this.#lateness;
    window.leastMs = Math.min(window.leastMs, lateMs);
    if (lateMs < -AUDIO_RESYNC_MS) return this.#restartLateness(arrivedCaptureMs);
    if (arrivedCaptureMs - window.sinceMs < LATENESS_WINDOW_MS) return expectedMs;
    const behindMs = window.leastMs;
    this.#restartLateness(arrivedCaptureMs);
    return behindMs > AUDIO_RESYNC_MS ? expectedMs + behindMs : expectedMs;
  }

  #restartLateness(nowMs: number): number {
    this.#lateness = { sinceMs: nowMs, leastMs: Infinity };
    return nowMs;
  }
}
