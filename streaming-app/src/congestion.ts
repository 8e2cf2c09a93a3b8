// Send-side bandwidth estimation from transport-wide congestion control feedback, in the manner of
// Google Congestion Control (draft-ietf-rmcat-gcc): a delay-based part (the trend of one-way queuing
// delay across packet groups against an adaptive threshold, confirmed by a standing queue; AIMD on the
// acknowledged rate) and a loss-based part (back off above 10 % loss, grow below 2 %). The receiver's
// REMB, when it sends one, caps the result. A decrease is judged again only on packets that left after
// it: feedback about packets sent before it describes a queue (or losses) it has already answered, and
// acting on it twice would pull the rate far below the link (seen at a 20 → 2 Mbit/s drop: 6000 → 1655 →
// 423 → 300 kbit/s).
// Pure arithmetic on times it is given: the session feeds it and reads `targetKbps`.

export type CongestionSettings = {
  startKbps: number;
  minKbps: number;
  maxKbps: number;
};

export type PacketFeedback = { sequenceNumber: number; received: boolean; receivedAtMs: number };

type SentPacket = { sendMs: number; bytes: number };
type Group = { firstSendMs: number; lastSendMs: number; firstArrivalMs: number; lastArrivalMs: number; bytes: number };
type Usage = 'normal' | 'overuse' | 'underuse';

/** Packets sent within this many ms form one group (a burst the network sees as one). */
const GROUP_SPAN_MS = 5;
/**
 * Packets that arrive within this long of the group's last, sooner after it than they left, arrived in a
 * burst: held up together (a receiver's thread off the CPU on a loaded host, a Wi-Fi station's turn),
 * not queued one behind the other at a bottleneck, which spaces them by its rate. They join the group, so
 * the hold-up shows as one late group instead of a step up and back down that reads as over-use (seen:
 * 17 decreases in 30 s at load 12 on a clean link). A burst spans at most BURST_MAX_MS.
 */
const BURST_GAP_MS = 5;
const BURST_MAX_MS = 100;
const TREND_WINDOW = 20;
const TREND_SMOOTHING = 0.9;
const TREND_GAIN = 4;
const THRESHOLD_START_MS = 12.5;
const THRESHOLD_UP = 0.0087;
const THRESHOLD_DOWN = 0.039;
const OVERUSE_MIN_MS = 10;
/**
 * An over-use needs a standing queue as well as a rising trend: every packet of the last STANDING_WINDOW_MS
 * delayed at least STANDING_QUEUE_MS beyond the path's lowest delay (a minimum filter, as LEDBAT takes of
 * its delay samples). A hold-up on the way (a router's or host's thread off the CPU for tens of ms; the
 * emulated link under load held packets up to 70 ms) delays a bunch of packets and not the ones after it;
 * spread out by jitter, burst grouping cannot take it out, and the trend read it as over-use: 9 decreases
 * in 30 s of a steady 6 Mbit/s series with hold-ups of 5-80 ms and ±5 ms jitter, none with this
 * (test/congestion.test.ts). A bottleneck's queue holds every packet: when its trend is found it stands at
 * 21 ms or more (simulated 3 Mbit/s link and 20 → 2 Mbit/s drop, decided at the same moments as without
 * the filter). A longer window filters longer hold-ups but finds a queue that grows from empty later by
 * as much (200 ms: 300 ms after it began instead of 170).
 */
const STANDING_WINDOW_MS = 60;
const STANDING_QUEUE_MS = 10;
const DECREASE_FACTOR = 0.85;
/**
 * After a decrease, the queue that built up is drained within this long by sending that much less than
 * the new estimate (as libwebrtc's congestion window pushback does): at a sudden drop the queue is full,
 * and 0.85 of the link alone would take seconds to empty it, every frame meanwhile late or lost.
 */
const DRAIN_MS = 500;
/** The drain never takes more than this share of the estimate. */
const MAX_DRAIN_SHARE = 0.5;
/** The lowest one-way delay (the path without a queue) is remembered over about this long. */
const BASE_DELAY_WINDOW_MS = 10_000;
/** Multiplicative growth per second far from the last congestion point; additive close to it. */
const GROWTH_PER_SECOND = 1.4;
const ADDITIVE_KBPS_PER_SECOND = 150;
/** Throughput is measured over this much of the receiver's own clock: at a bottleneck, arrivals are paced by the link. */
const ACKED_WINDOW_MS = 500;
const RECENT_ARRIVALS_MS = 150;
/** Recent packets that arrived slower than this share of the pace they left at had queued on the way. */
const QUEUED_SHARE = 0.9;
const LOSS_WINDOW_MS = 1000;
const HISTORY = 1 << 16;

export class BandwidthEstimator {
  readonly #settings: CongestionSettings;
  readonly #sent = new Map<number, SentPacket>();
  #delayKbps: number;
  #lossKbps: number;
  #rembKbps = Infinity;
  #group: Group | undefined;
  #previousGroup: Group | undefined;
  #accumulatedDelayMs = 0;
  #smoothedDelayMs = 0;
  #trend: { x: number; y: number }[] = [];
  #deltaCount = 0;
  #thresholdMs = THRESHOLD_START_MS;
  #lastThresholdUpdateMs: number | undefined;
  #overuseSinceMs: number | undefined;
  #previousTrend = 0;
  #lastModified = 0;
  #usage: Usage = 'normal';
  #lastUpdateMs: number | undefined;
  #lastDecreaseMs = -Infinity;
  /** When the delay detector last found the bottleneck's queue building (and the rate went down for it). */
  #lastOveruseMs = -Infinity;
  /** Acknowledged rate at recent decreases: near it, growth is additive. */
  #capacityKbps: { mean: number; variance: number } | undefined;
  /** Received packets by receive time (the receiver's clock), newest last. */
  #acked: { receivedAtMs: number; sendMs: number; bytes: number }[] = [];
  #lossSamples: { atMs: number; sendMs: number; received: boolean }[] = [];
  /** When the newest group the detector judged began to leave (sender's clock). */
  #judgedSendMs = -Infinity;
  /** Lowest one-way delay (receiver's clock minus sender's) in this and the previous window. */
  #baseDelay = { current: Infinity, previous: Infinity, windowStartMs: -Infinity };
  #queueDelayMs = 0;
  /** Each received packet's one-way delay above the base, by arrival (receiver's clock), newest last. */
  #recentQueue: { arrivalMs: number; queueMs: number }[] = [];
  #drain = { kbps: 0, untilMs: -Infinity };
  /** Counters for stats and tests. */
  overuseEvents = 0;
  lossBackoffs = 0;

  constructor(settings: CongestionSettings) {
    this.#settings = settings;
    this.#delayKbps = settings.startKbps;
    this.#lossKbps = settings.maxKbps;
  }

  /** The rate the encoder should aim for now (less, for a while after a decrease, to drain the queue). */
  get targetKbps(): number {
    const { minKbps, maxKbps } = this.#settings;
    const drain = (this.#lastUpdateMs ?? -Infinity) < this.#drain.untilMs ? this.#drain.kbps : 0;
    return Math.round(Math.max(minKbps, Math.min(this.#delayKbps, this.#lossKbps, this.#rembKbps, maxKbps) - drain));
  }

  /** How much longer than the path's lowest delay the newest packets took: the bottleneck's queue, ms. */
  get queueDelayMs(): number {
    return this.#queueDelayMs;
  }

  get usage(): Usage {
    return this.#usage;
  }

  /** Whether the bottleneck's queue built within `windowMs` (over-use now, or a decrease for it since). */
  queueBuiltWithin(nowMs: number, windowMs: number): boolean {
    return this.#usage === 'overuse' || nowMs - this.#lastOveruseMs < windowMs;
  }

  /** The detector's latest modified trend against its threshold, and the standing queue, ms (for logs). */
  get detector(): { trendMs: number; thresholdMs: number; standingQueueMs: number } {
    const round = (ms: number) => Math.round(ms * 100) / 100;
    return { trendMs: round(this.#lastModified), thresholdMs: round(this.#thresholdMs), standingQueueMs: round(this.standingQueueMs) };
  }

  /** The rate at which packets arrived over the receiver's last ACKED_WINDOW_MS, kbit/s. */
  get ackedKbps(): number {
    const newest = this.#acked.at(-1)?.receivedAtMs;
    if (newest === undefined) return 0;
    this.#acked = this.#acked.filter((a) => a.receivedAtMs > newest - ACKED_WINDOW_MS);
    return this.#arrivalKbps(ACKED_WINDOW_MS);
  }

  /** Arrival rate over the receiver's last `windowMs`. */
  #arrivalKbps(windowMs: number): number {
    const newest = this.#acked.at(-1)?.receivedAtMs;
    if (newest === undefined) return 0;
    let bytes = 0;
    for (const a of this.#acked) if (a.receivedAtMs > newest - windowMs) bytes += a.bytes;
    return (bytes * 8) / windowMs;
  }

  /**
   * The link's rate now, from the receiver's last RECENT_ARRIVALS_MS, when those packets queued on the way
   * (they left faster than they arrived); undefined when they arrived as fast as they left. Then the
   * sender set their pace (draining after a decrease, a quiet encoder), and their rate says nothing of the
   * link: on a loaded host, jitter read as over-use right after a decrease took the estimate from that
   * pace down to the floor, step by step.
   */
  #queuedArrivalKbps(): number | undefined {
    const newest = this.#acked.at(-1)?.receivedAtMs;
    if (newest === undefined) return undefined;
    const recent = this.#acked.filter((a) => a.receivedAtMs > newest - RECENT_ARRIVALS_MS);
    const bytes = recent.reduce((sum, a) => sum + a.bytes, 0);
    const sendSpanMs = Math.max(...recent.map((a) => a.sendMs)) - Math.min(...recent.map((a) => a.sendMs));
    const arrivalKbps = (bytes * 8) / RECENT_ARRIVALS_MS;
    const sendKbps = (bytes * 8) / Math.max(sendSpanMs, 1);
    return arrivalKbps < QUEUED_SHARE * sendKbps ? arrivalKbps : undefined;
  }

  /** Fraction of packets reported lost over the last second. */
  lossFraction(nowMs: number): number {
    const { lost, packets } = this.recentLoss(nowMs);
    return packets === 0 ? 0 : lost / packets;
  }

  /** Packets reported on over the last second, and how many of them were lost. */
  recentLoss(nowMs: number): { lost: number; packets: number } {
    this.#lossSamples = this.#lossSamples.filter((s) => s.atMs > nowMs - LOSS_WINDOW_MS);
    return { lost: this.#lossSamples.filter((s) => !s.received).length, packets: this.#lossSamples.length };
  }

  packetSent(sequenceNumber: number, bytes: number, sendMs: number): void {
    this.#sent.set(sequenceNumber & 0xffff, { sendMs, bytes });
    if (this.#sent.size > HISTORY / 2) {
      // Map iteration is insertion order: the oldest go first.
      for (const key of this.#sent.keys()) {
        this.#sent.delete(key);
        if (this.#sent.size <= HISTORY / 4) break;
      }
    }
  }

  /** The receiver's own estimate (REMB): an upper bound. */
  remb(bitsPerSecond: number): void {
    if (bitsPerSecond > 0) this.#rembKbps = bitsPerSecond / 1000;
  }

  /** One transport-wide feedback report, in sequence order. */
  feedback(results: PacketFeedback[], nowMs: number): void {
    for (const result of results) {
      const sent = this.#sent.get(result.sequenceNumber & 0xffff);
      if (!sent) continue;
      this.#sent.delete(result.sequenceNumber & 0xffff);
      this.#lossSamples.push({ atMs: nowMs, sendMs: sent.sendMs, received: result.received });
      if (!result.received) continue;
      this.#noteOneWayDelay(result.receivedAtMs - sent.sendMs, result.receivedAtMs, nowMs);
      this.#acked.push({ receivedAtMs: result.receivedAtMs, sendMs: sent.sendMs, bytes: sent.bytes });
      this.#addToGroup(sent, result.receivedAtMs);
    }
    this.#updateRate(nowMs);
  }

  /** One-way delay against the lowest seen lately; the two clocks' offset cancels out. */
  #noteOneWayDelay(delayMs: number, arrivalMs: number, nowMs: number): void {
    const base = this.#baseDelay;
    if (nowMs - base.windowStartMs > BASE_DELAY_WINDOW_MS) {
      base.previous = base.current;
      base.current = Infinity;
      base.windowStartMs = nowMs;
    }
    base.current = Math.min(base.current, delayMs);
    let queue = delayMs - Math.min(base.current, base.previous);
    // A jump this large is a receiver clock or report glitch, not queuing: start over from here.
    if (queue > 3000) {
      base.previous = base.current = delayMs;
      queue = 0;
    }
    this.#queueDelayMs = 0.7 * this.#queueDelayMs + 0.3 * queue;
    this.#recentQueue.push({ arrivalMs, queueMs: queue });
    while (this.#recentQueue[0].arrivalMs < arrivalMs - STANDING_WINDOW_MS) this.#recentQueue.shift();
  }

  /** The delay beyond the path's lowest that every packet of the last STANDING_WINDOW_MS had: jitter comes and goes, a queue stays. */
  get standingQueueMs(): number {
    return this.#recentQueue.reduce((lowest, p) => Math.min(lowest, p.queueMs), Infinity);
  }

  #addToGroup(sent: SentPacket, arrivalMs: number): void {
    const group = this.#group;
    if (group && (sent.sendMs - group.firstSendMs <= GROUP_SPAN_MS || inBurst(group, sent.sendMs, arrivalMs))) {
      group.lastSendMs = Math.max(group.lastSendMs, sent.sendMs);
      group.lastArrivalMs = Math.max(group.lastArrivalMs, arrivalMs);
      group.bytes += sent.bytes;
      return;
    }
    if (group) this.#closeGroup(group);
    this.#group = { firstSendMs: sent.sendMs, lastSendMs: sent.sendMs, firstArrivalMs: arrivalMs, lastArrivalMs: arrivalMs, bytes: sent.bytes };
  }

  /** A finished group against the one before: how much longer it took to arrive than to leave. */
  #closeGroup(group: Group): void {
    const previous = this.#previousGroup;
    this.#previousGroup = group;
    if (!previous) return;
    const sendDelta = group.lastSendMs - previous.lastSendMs;
    const arrivalDelta = group.lastArrivalMs - previous.lastArrivalMs;
    if (sendDelta < 0) return; // reordered
    this.#judgedSendMs = group.firstSendMs;
    // A jump this large is a receiver clock or report glitch, not queuing: start the trend over.
    if (Math.abs(arrivalDelta - sendDelta) > 3000) {
      this.#accumulatedDelayMs = 0;
      this.#smoothedDelayMs = 0;
      this.#trend = [];
      return;
    }
    this.#accumulatedDelayMs += arrivalDelta - sendDelta;
    this.#smoothedDelayMs = TREND_SMOOTHING * this.#smoothedDelayMs + (1 - TREND_SMOOTHING) * this.#accumulatedDelayMs;
    this.#trend.push({ x: group.lastArrivalMs, y: this.#smoothedDelayMs });
    if (this.#trend.length > TREND_WINDOW) this.#trend.shift();
    this.#deltaCount++;
    if (this.#trend.length >= 2) this.#detect(slope(this.#trend), group.lastArrivalMs);
  }

  #detect(trendSlope: number, nowMs: number): void {
    const modified = trendSlope * Math.min(this.#deltaCount, 60) * TREND_GAIN;
    this.#lastModified = modified;
    if (modified > this.#thresholdMs && this.standingQueueMs >= STANDING_QUEUE_MS) {
      this.#overuseSinceMs ??= nowMs;
      if (nowMs - this.#overuseSinceMs >= OVERUSE_MIN_MS && trendSlope >= this.#previousTrend) this.#usage = 'overuse';
    } else {
      this.#overuseSinceMs = undefined;
      this.#usage = modified < -this.#thresholdMs ? 'underuse' : 'normal';
    }
    this.#previousTrend = trendSlope;
    this.#adaptThreshold(modified, nowMs);
  }

  /** The threshold follows the trend slowly, so that a competing TCP flow does not starve us. */
  #adaptThreshold(modified: number, nowMs: number): void {
    const last = this.#lastThresholdUpdateMs ?? nowMs;
    this.#lastThresholdUpdateMs = nowMs;
    if (Math.abs(modified) > this.#thresholdMs + 15) return;
    const k = Math.abs(modified) < this.#thresholdMs ? THRESHOLD_DOWN : THRESHOLD_UP;
    const dt = Math.min(nowMs - last, 100);
    this.#thresholdMs = Math.min(600, Math.max(6, this.#thresholdMs + k * (Math.abs(modified) - this.#thresholdMs) * dt));
  }

  #updateRate(nowMs: number): void {
    const dtS = this.#lastUpdateMs === undefined ? 0 : Math.min((nowMs - this.#lastUpdateMs) / 1000, 1);
    this.#lastUpdateMs = nowMs;
    const acked = this.ackedKbps;
    this.#updateDelayBased(acked, dtS, nowMs);
    this.lossFraction(nowMs); // drops samples older than the window
    this.#updateLossBased(dtS, nowMs);
  }

  #updateDelayBased(ackedKbps: number, dtS: number, nowMs: number): void {
    if (this.#usage === 'overuse') {
      // A queue that built before the last decrease still shows as over-use until it has drained: only
      // packets that left after the decrease say whether it was enough.
      if (nowMs - this.#lastDecreaseMs < 200 || this.#judgedSendMs <= this.#lastDecreaseMs || ackedKbps === 0) return;
      // While a queue builds, the latest arrivals are paced by the bottleneck: their rate is the link's
      // now, where the longer average still remembers the rate before a drop.
      const linkKbps = Math.min(ackedKbps, this.#queuedArrivalKbps() || ackedKbps);
      this.#delayKbps = Math.min(this.#delayKbps, DECREASE_FACTOR * linkKbps);
      const queuedKbit = (this.#queueDelayMs * linkKbps) / 1000;
      this.#drain = { kbps: Math.min(MAX_DRAIN_SHARE * this.#delayKbps, (queuedKbit * 1000) / DRAIN_MS), untilMs: nowMs + DRAIN_MS };
      this.#lastDecreaseMs = nowMs;
      this.#lastOveruseMs = nowMs;
      this.overuseEvents++;
      this.#noteCapacity(ackedKbps);
      this.#usage = 'normal';
      return;
    }
    if (this.#usage === 'underuse') return; // the queue is draining: hold
    const capacity = this.#capacityKbps;
    // Near the rate where the link last pushed back, grow additively; once more than that gets through,
    // the link has changed and growth is multiplicative again. Below the band (right after a decrease)
    // growth is multiplicative too: otherwise a link that came back just then would be found seconds later.
    const spread = capacity ? 3 * Math.sqrt(capacity.variance * capacity.mean) : 0;
    if (capacity && ackedKbps > capacity.mean + spread) this.#capacityKbps = undefined;
    const nearCapacity = this.#capacityKbps !== undefined && capacity !== undefined
      && this.#delayKbps > capacity.mean - spread && this.#delayKbps < capacity.mean + spread;
    const grown = nearCapacity
      ? this.#delayKbps + ADDITIVE_KBPS_PER_SECOND * dtS
      : this.#delayKbps * GROWTH_PER_SECOND ** dtS;
    // Never more than 1.5x what actually arrives: an idle encoder must not inflate the estimate.
    const ceiling = ackedKbps > 0 ? 1.5 * ackedKbps + 10 : this.#delayKbps;
    this.#delayKbps = Math.min(Math.max(this.#delayKbps, Math.min(grown, ceiling)), this.#settings.maxKbps);
  }

  #noteCapacity(kbps: number): void {
    const c = this.#capacityKbps;
    // A sample far from the estimate means the link changed: start over from it.
    if (!c || Math.abs(kbps - c.mean) > 3 * Math.sqrt(c.variance * c.mean)) {
      this.#capacityKbps = { mean: kbps, variance: 0.4 };
      return;
    }
    const mean = 0.95 * c.mean + 0.05 * kbps;
    const norm = Math.max(mean, 1);
    const variance = Math.min(2.5, Math.max(0.4, 0.95 * c.variance + (0.05 * (kbps - mean) ** 2) / norm));
    this.#capacityKbps = { mean, variance };
  }

  #updateLossBased(dtS: number, nowMs: number): void {
    // Losses of packets sent before the last decrease were answered by it (as with RTCP's fraction lost,
    // which covers only the interval since the previous report).
    const since = this.#lossSamples.filter((sample) => sample.sendMs > this.#lastDecreaseMs);
    const n = since.length;
    if (n < 20) return;
    const lost = since.filter((sample) => !sample.received).length;
    const loss = lost / n;
    // Clearly above 10 %, by two standard deviations of the count at 10 %: a short window (as after every
    // decrease) at a steady 5 % often holds 3 lost of 20, and a backoff read from that would hold for good.
    if (lost > n * 0.1 + 2 * Math.sqrt(n * 0.1 * 0.9)) {
      if (nowMs - this.#lastDecreaseMs < 300) return;
      this.#lossKbps = Math.min(this.#lossKbps, this.targetKbps) * (1 - 0.5 * loss);
      this.#lastDecreaseMs = nowMs;
      this.lossBackoffs++;
    } else if (loss < 0.02) {
      this.#lossKbps = Math.min(this.#settings.maxKbps, this.#lossKbps * GROWTH_PER_SECOND ** dtS + 1);
    }
  }
}

function inBurst(group: Group, sendMs: number, arrivalMs: number): boolean {
  const arrivalDelta = arrivalMs - group.lastArrivalMs;
  return arrivalDelta <= BURST_GAP_MS && arrivalDelta < sendMs - group.lastSendMs && arrivalMs - group.firstArrivalMs < BURST_MAX_MS;
}

/** Least-squares slope of y over x. */
function slope(points: { x: number; y: number }[]): number {
  const n = points.length;
  const meanX = points.reduce((s, p) => s + p.x, 0) / n;
  const meanY = points.reduce((s, p) => s + p.y, 0) / n;
  let numerator = 0;
  let denominator = 0;
  for (const p of points) {
    numerator += (p.x - meanX) * (p.y - meanY);
    denominator += (p.x - meanX) ** 2;
  }
  return denominator === 0 ? 0 : numerator / denominator;
}
