// Once a second: the receiver's WebRTC statistics (differences over the last second where the counters
// are cumulative), the app's own encoder figures and the barcode measurements, shown in a small overlay.
import type { AppStatsMessage } from './protocol.ts';
import type { FrameMeter } from './frame-meter.ts';

export type StreamMetrics = {
  fps: number | undefined;
  bitrateKbps: number | undefined;
  rttMs: number | undefined;
  jitterBufferMs: number | undefined;
  decodeMs: number | undefined;
  framesDecoded: number | undefined;
  framesDropped: number | undefined;
  packetsLost: number | undefined;
  decoder: string | undefined;
  codec: string | undefined;
  localCandidateType: string | undefined;
  remoteCandidateType: string | undefined;
  inputToPhotonMs: number | undefined;
  inputToPhotonP50Ms: number | undefined;
  setupMs: number | undefined;
  appEncodeMs: number | undefined;
  appEncoder: string | undefined;
};

type Totals = { at: number; bytes: number; decoded: number; decodeTime: number; jbDelay: number; jbEmitted: number };

function percentile(values: number[], p: number): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

const round = (value: number | undefined, digits = 0): number | undefined =>
  value === undefined || !Number.isFinite(value) ? undefined : Math.round(value * 10 ** digits) / 10 ** digits;

export class StatsOverlay {
  readonly #element: HTMLElement;
  readonly #meter: FrameMeter;
  #previous: Totals | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #pc: RTCPeerConnection | undefined;
  appStats: AppStatsMessage | undefined;
  status = '';
  latest: StreamMetrics = {
    fps: undefined, bitrateKbps: undefined, rttMs: undefined, jitterBufferMs: undefined, decodeMs: undefined,
    framesDecoded: undefined, framesDropped: undefined, packetsLost: undefined, decoder: undefined, codec: undefined,
    localCandidateType: undefined, remoteCandidateType: undefined, inputToPhotonMs: undefined,
    inputToPhotonP50Ms: undefined, setupMs: undefined, appEncodeMs: undefined, appEncoder: undefined,
  };

  constructor(element: HTMLElement, meter: FrameMeter) {
    this.#element = element;
    this.#meter = meter;
  }

  watch(pc: RTCPeerConnection | undefined): void {
    if (pc !== this.#pc) this.#previous = undefined;
    this.#pc = pc;
    this.#timer ??= setInterval(() => { void this.refresh(); }, 1000);
  }

  async refresh(): Promise<StreamMetrics> {
    const m = this.latest;
    const pc = this.#pc;
    if (pc) {
      const report = await pc.getStats();
      let inbound: Record<string, any> | undefined;
      let transport: Record<string, any> | undefined;
      report.forEach((s: Record<string, any>) => {
        if (s.type === 'inbound-rtp' && s.kind === 'video') inbound = s;
        if (s.type === 'transport') transport = s;
      });
      const pair = transport?.selectedCandidatePairId ? report.get(transport.selectedCandidatePairId) : undefined;
      if (pair) {
        m.rttMs = round(pair.currentRoundTripTime * 1000, 1);
        m.localCandidateType = report.get(pair.localCandidateId)?.candidateType;
        m.remoteCandidateType = report.get(pair.remoteCandidateId)?.candidateType;
      }
      if (inbound) {
        const now: Totals = {
          at: inbound.timestamp, bytes: inbound.bytesReceived ?? 0, decoded: inbound.framesDecoded ?? 0,
          decodeTime: inbound.totalDecodeTime ?? 0, jbDelay: inbound.jitterBufferDelay ?? 0, jbEmitted: inbound.jitterBufferEmittedCount ?? 0,
        };
        const prev = this.#previous;
        if (prev && now.at > prev.at) {
          const seconds = (now.at - prev.at) / 1000;
          const decoded = now.decoded - prev.decoded;
          m.fps = round(decoded / seconds, 1);
          m.bitrateKbps = round(((now.bytes - prev.bytes) * 8) / seconds / 1000);
          m.decodeMs = decoded > 0 ? round(((now.decodeTime - prev.decodeTime) / decoded) * 1000, 2) : undefined;
          const emitted = now.jbEmitted - prev.jbEmitted;
          m.jitterBufferMs = emitted > 0 ? round(((now.jbDelay - prev.jbDelay) / emitted) * 1000, 1) : undefined;
        }
        this.#previous = now;
        m.framesDecoded = inbound.framesDecoded;
        m.framesDropped = inbound.framesDropped;
        m.packetsLost = inbound.packetsLost;
        m.decoder = inbound.decoderImplementation;
        m.codec = inbound.codecId ? report.get(inbound.codecId)?.mimeType : undefined;
      }
    }
    const samples = this.#meter.inputToPhotonMs;
    m.inputToPhotonMs = round(samples.at(-1), 1);
    m.inputToPhotonP50Ms = round(percentile(samples.slice(-60), 50), 1);
    m.setupMs = round(this.#meter.setupMs);
    m.appEncodeMs = this.appStats?.encodeMsP50;
    m.appEncoder = this.appStats?.encoder;
    this.#render();
    return m;
  }

  #render(): void {
    const m = this.latest;
    const show = (value: number | string | undefined, unit = ''): string => (value === undefined ? '–' : `${value}${unit}`);
    const lines = [
      `${this.status}`,
      `fps ${show(m.fps)}   bitrate ${show(m.bitrateKbps, ' kb/s')}   ${show(m.codec)} ${m.decoder ? `(${m.decoder})` : ''}`,
      `rtt ${show(m.rttMs, ' ms')}   jitter buffer ${show(m.jitterBufferMs, ' ms')}   decode ${show(m.decodeMs, ' ms')}`,
      `frames decoded ${show(m.framesDecoded)}   dropped ${show(m.framesDropped)}   lost packets ${show(m.packetsLost)}`,
      `input→photon ${show(m.inputToPhotonMs, ' ms')} (p50 ${show(m.inputToPhotonP50Ms, ' ms')})   setup ${show(m.setupMs, ' ms')}`,
      `app encode ${show(m.appEncodeMs, ' ms')} ${m.appEncoder ?? ''}   path ${show(m.localCandidateType)}→${show(m.remoteCandidateType)}`,
    ];
    this.#element.textContent = lines.join('\n');
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
