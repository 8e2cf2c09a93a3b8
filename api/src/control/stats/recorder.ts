// What each API replica counts of the invocations it answers, for the owners' numbers: the hot path adds
// to a tally in memory (a map lookup, a few additions, one bucket); the load (queue depth, in flight) is
// sampled every second; at the end of each interval the tallies become one row per active version
// (repo.ts) and start again. A stop writes the interval so far, so a restart loses nothing counted.
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { FunctionLoad, FunctionRef } from '../../domain/load.ts';
import type { Logger } from '../../logger.ts';
import { BUCKETS, bucketOf, type Histogram } from './histogram.ts';
import type { StatsRepo, StatsRow } from './repo.ts';
import type { StatsSettings } from './settings.ts';

interface Tally {
  ref: FunctionRef;
  requests: number;
  clientErrors: number;
  rateLimited: number;
  serverErrors: number;
  /** Counts per latency bucket (histogram.ts), dense while counting. */
  latency: number[];
  latencySumMs: number;
  queueMax: number;
  queueSum: number;
  inflightMax: number;
  inflightSum: number;
}

const SAMPLE_MS = 1000;
/** Retention is enforced at most this often (by any replica: deleting is idempotent). */
const PRUNE_MS = 10 * 60_000;

export interface StatsRecorderOptions {
  repo: Pick<StatsRepo, 'insert' | 'deleteBefore'>;
  settings: StatsSettings;
  /** The planes' load now (invocation and streaming, as the load gauges of /metrics read it). */
  loads(): Iterable<FunctionLoad>;
  log: Logger;
  now: () => Date;
}

export class StatsRecorder {
  /** Which process wrote a row: a new one per start, so a restarted replica never writes a row twice. */
  readonly replica = `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  readonly #options: StatsRecorderOptions;
  readonly #intervalMs: number;
  #tallies = new Map<string, Tally>();
  #samples = 0;
  #intervalStart: number;
  #lastPrune = 0;
  #sampler: NodeJS.Timeout | undefined;
  #flusher: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(options: StatsRecorderOptions) {
    this.#options = options;
    this.#intervalMs = options.settings.intervalSeconds * 1000;
    this.#intervalStart = this.#aligned(this.#clock());
  }

  /** One answered invocation of a version (the invocation routes' observer). */
  observe(ref: FunctionRef, status: number, seconds: number) {
    const tally = this.#tally(ref);
    tally.requests++;
    if (status >= 500) tally.serverErrors++;
    else if (status >= 400) {
      tally.clientErrors++;
      if (status === 429) tally.rateLimited++;
    }
    const ms = seconds * 1000;
    tally.latency[bucketOf(ms)]++;
    tally.latencySumMs += ms;
  }

  start() {
    this.#sampler = setInterval(() => this.#sample(), SAMPLE_MS);
    this.#sampler.unref();
    this.#schedule();
  }

  /** Writes the interval so far. */
  async stop() {
    this.#stopped = true;
    clearInterval(this.#sampler);
    clearTimeout(this.#flusher);
    await this.#flush();
  }

  #clock = () => this.#options.now().getTime();
  #aligned = (ms: number) => Math.floor(ms / this.#intervalMs) * this.#intervalMs;

  #tally(ref: FunctionRef): Tally {
    let tally = this.#tallies.get(ref.versionId);
    if (!tally) {
      tally = {
        ref: { ncaId: ref.ncaId, functionId: ref.functionId, versionId: ref.versionId }, requests: 0, clientErrors: 0, rateLimited: 0, serverErrors: 0,
        latency: new Array<number>(BUCKETS).fill(0), latencySumMs: 0, queueMax: 0, queueSum: 0, inflightMax: 0, inflightSum: 0,
      };
      this.#tallies.set(ref.versionId, tally);
    }
    return tally;
  }

  /** Adds this second's load; a version idle now and without a tally gets none (no row for idle versions). */
  #sample() {
    this.#samples++;
    const byVersion = new Map<string, { ref: FunctionLoad; queued: number; inflight: number }>();
    for (const load of this.#options.loads()) {
      const seen = byVersion.get(load.versionId);
      if (seen) {
        seen.queued += load.queued;
        seen.inflight += load.inflight;
      } else byVersion.set(load.versionId, { ref: load, queued: load.queued, inflight: load.inflight });
    }
    for (const { ref, queued, inflight } of byVersion.values()) {
      if (queued === 0 && inflight === 0) continue;
      const tally = this.#tally(ref);
      tally.queueMax = Math.max(tally.queueMax, queued);
      tally.queueSum += queued;
      tally.inflightMax = Math.max(tally.inflightMax, inflight);
      tally.inflightSum += inflight;
    }
  }

  #schedule() {
    if (this.#stopped) return;
    const delay = Math.max(0, this.#intervalStart + this.#intervalMs - this.#clock());
    this.#flusher = setTimeout(() => void this.#flush().finally(() => this.#schedule()), delay);
    this.#flusher.unref();
  }

  async #flush() {
    const tallies = this.#tallies;
    const samples = this.#samples;
    const at = this.#intervalStart;
    this.#tallies = new Map();
    this.#samples = 0;
    const now = this.#clock();
    this.#intervalStart = Math.max(this.#aligned(now), at + this.#intervalMs);
    const rows = [...tallies.values()].map((tally) => this.#row(tally, at, samples));
    try {
      await this.#options.repo.insert(rows);
      if (now - this.#lastPrune >= PRUNE_MS) {
        this.#lastPrune = now;
        await this.#options.repo.deleteBefore(new Date(now - this.#options.settings.retentionHours * 3_600_000).toISOString());
      }
    } catch (error) {
      this.#options.log.warn({ err: error, rows: rows.length }, 'could not write function stats; this interval is lost');
    }
  }

  #row(tally: Tally, at: number, samples: number): StatsRow {
    const latency: Histogram = {};
    tally.latency.forEach((count, index) => {
      if (count) latency[index] = count;
    });
    const mean = (sum: number) => (samples > 0 ? sum / samples : 0);
    return {
      version_id: tally.ref.versionId, at: new Date(at).toISOString(), seconds: this.#intervalMs / 1000, replica: this.replica,
      nca_id: tally.ref.ncaId, function_id: tally.ref.functionId,
      requests: tally.requests, client_errors: tally.clientErrors, rate_limited: tally.rateLimited, server_errors: tally.serverErrors,
      latency, latency_sum_ms: tally.latencySumMs,
      queue_max: tally.queueMax, queue_mean: mean(tally.queueSum), inflight_max: tally.inflightMax, inflight_mean: mean(tally.inflightSum),
    };
  }
}
