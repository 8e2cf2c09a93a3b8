// Lip-sync for an app that asks for it (STREAMING_LIP_SYNC=true puts picture and sound in one stream).
// The browser lines such tracks up itself, but only to within 30 ms and without the delay of its audio
// output, so the sound still trails the picture by tens of ms. This holds the picture back by what is left:
// once a second it compares what each track plays now in the sender's capture time (getStats'
// estimatedPlayoutTimestamp), adds the audio output's delay (media-playout), and moves the video
// receiver's jitterBufferTarget halfway toward closing the gap.

const PERIOD_MS = 1000;
const MAX_HOLD_MS = 400;

/** One reading: how far the picture is ahead of the sound as heard, ms. */
export type SyncReading = { videoPlayoutMs: number; audioPlayoutMs: number; audioOutputMs: number };

/** The next hold of the picture, ms: half of the gap closed per reading, so a noisy reading cannot swing it. */
export function nextHold(hold: number, reading: SyncReading): number {
  const ahead = reading.videoPlayoutMs - reading.audioPlayoutMs + reading.audioOutputMs;
  return Math.min(MAX_HOLD_MS, Math.max(0, hold + ahead / 2));
}

type PlayoutStats = { totalPlayoutDelay: number; totalSamplesCount: number };
// What this needs of the peer connection and the video receiver (structural: the tests' type check has no DOM).
type Stats = { type: string; [field: string]: unknown };
type StatsSource = { getStats(): Promise<{ forEach(each: (stats: Stats) => void): void }> };
type VideoReceiver = { jitterBufferTarget?: number | null };

export class PictureHold {
  readonly #pc: StatsSource;
  readonly #video: VideoReceiver;
  readonly #timer: ReturnType<typeof setInterval>;
  #hold = 0;
  #playout: PlayoutStats | undefined;

  constructor(pc: StatsSource, video: VideoReceiver) {
    this.#pc = pc;
    this.#video = video;
    this.#timer = setInterval(() => void this.#adjust().catch(() => {}), PERIOD_MS);
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  async #adjust(): Promise<void> {
    const report = await this.#pc.getStats();
    const playout: Record<string, number> = {};
    let output: PlayoutStats | undefined;
    report.forEach(({ type, kind, estimatedPlayoutTimestamp, totalPlayoutDelay, totalSamplesCount }) => {
      if (type === 'inbound-rtp' && typeof kind === 'string' && typeof estimatedPlayoutTimestamp === 'number') playout[kind] = estimatedPlayoutTimestamp;
      if (type === 'media-playout' && typeof totalPlayoutDelay === 'number' && typeof totalSamplesCount === 'number') output = { totalPlayoutDelay, totalSamplesCount };
    });
    // The output's delay over the last period (the totals grow for the whole session).
    const before = this.#playout;
    this.#playout = output;
    if (playout.video === undefined || playout.audio === undefined || !output || !before) return;
    const samples = output.totalSamplesCount - before.totalSamplesCount;
    if (samples <= 0) return;
    const audioOutputMs = (1000 * (output.totalPlayoutDelay - before.totalPlayoutDelay)) / samples;
    this.#hold = nextHold(this.#hold, { videoPlayoutMs: playout.video, audioPlayoutMs: playout.audio, audioOutputMs });
    this.#video.jitterBufferTarget = this.#hold;
  }
}
