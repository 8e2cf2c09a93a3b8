// The owners' numbers of a function version over a window: the rows every replica wrote (recorder.ts)
// added up per step. Only the caller's own account's versions: another's are a 404 like unknown ones.
import type { Principal } from '../../domain/principal.ts';
import { invalid, notFound } from '../../domain/problem.ts';
import { parseDuration } from '../../duration.ts';
import type { FunctionsRepo } from '../functions/repo.ts';
import { addInto, quantile, type Histogram } from './histogram.ts';
import type { StatsRepo, StatsRow } from './repo.ts';
import type { StatsQuery, StatsPoint, VersionStats } from './schema.ts';
import type { StatsSettings } from './settings.ts';

const DEFAULT_SINCE_MS = 3_600_000;
/** The points a default step aims at, and the most a query may ask for. */
const DEFAULT_POINTS = 120;
const MAX_POINTS = 1000;

interface Window {
  start: number;
  end: number;
  stepMs: number;
}

/** Rows added up: counts, a merged histogram, and per interval the load of all replicas. */
class Sum {
  requests = 0;
  clientErrors = 0;
  rateLimited = 0;
  serverErrors = 0;
  latencySumMs = 0;
  readonly latency: Histogram = {};
  readonly intervals = new Map<string, { queueMax: number; queueMean: number; inflightMax: number; inflightMean: number }>();

  add(row: StatsRow) {
    this.requests += row.requests;
    this.clientErrors += row.client_errors;
    this.rateLimited += row.rate_limited;
    this.serverErrors += row.server_errors;
    this.latencySumMs += row.latency_sum_ms;
    addInto(this.latency, row.latency);
    const interval = this.intervals.get(row.at) ?? { queueMax: 0, queueMean: 0, inflightMax: 0, inflightMean: 0 };
    // The queue is one for all replicas (each reports the same depth on NATS): the largest report. In
    // flight is each replica's own: their sum.
    interval.queueMax = Math.max(interval.queueMax, row.queue_max);
    interval.queueMean = Math.max(interval.queueMean, row.queue_mean);
    interval.inflightMax += row.inflight_max;
    interval.inflightMean += row.inflight_mean;
    this.intervals.set(row.at, interval);
  }

  /** The numbers over `ms`, which spans `intervals` intervals (those without a row were idle). */
  numbers(ms: number, intervals: number): Omit<StatsPoint, 'at'> {
    const loads = [...this.intervals.values()];
    const mean = (pick: (load: (typeof loads)[number]) => number) => round(loads.reduce((sum, load) => sum + pick(load), 0) / Math.max(1, intervals));
    const max = (pick: (load: (typeof loads)[number]) => number) => loads.reduce((top, load) => Math.max(top, pick(load)), 0);
    return {
      requests: this.requests,
      requestsPerSecond: round(this.requests / (ms / 1000)),
      clientErrors: this.clientErrors,
      rateLimited: this.rateLimited,
      serverErrors: this.serverErrors,
      latencyMs: this.requests === 0 ? null : {
        p50: round(quantile(this.latency, 0.5) ?? 0), p99: round(quantile(this.latency, 0.99) ?? 0), mean: round(this.latencySumMs / this.requests),
      },
      queueDepth: { mean: mean((load) => load.queueMean), max: max((load) => load.queueMax) },
      inflight: { mean: mean((load) => load.inflightMean), max: max((load) => load.inflightMax) },
    };
  }
}

const round = (value: number) => Math.round(value * 1000) / 1000;

export interface StatsServiceOptions {
  repo: Pick<StatsRepo, 'range'>;
  functionsRepo: Pick<FunctionsRepo, 'findVersion' | 'listVersionsOf'>;
  settings: StatsSettings;
  now: () => Date;
}

export function createStatsService(options: StatsServiceOptions) {
  const intervalMs = options.settings.intervalSeconds * 1000;
  const retentionMs = options.settings.retentionHours * 3_600_000;

  /** The window a query asks for, or a 400 naming the field. */
  function windowOf(query: StatsQuery): Window {
    const end = options.now().getTime();
    const since = query.since === undefined ? end - DEFAULT_SINCE_MS
      : parseDuration(query.since) !== undefined ? end - parseDuration(query.since)! : Date.parse(query.since);
    if (since >= end) throw invalid([{ field: 'query since', message: 'must be in the past' }]);
    if (end - since > retentionMs) {
      throw invalid([{ field: 'query since', message: `reaches at most PT${options.settings.retentionHours}H back (stats.retentionHours)` }]);
    }
    const wanted = query.step === undefined ? (end - since) / DEFAULT_POINTS : parseDuration(query.step)!;
    // Rows are per interval: a step is a whole number of them.
    const stepMs = Math.max(1, Math.ceil(wanted / intervalMs)) * intervalMs;
    const start = Math.floor(since / stepMs) * stepMs;
    const points = Math.ceil((end - start) / stepMs);
    if (points > MAX_POINTS) {
      throw invalid([{ field: 'query step', message: `gives ${points} points; at most ${MAX_POINTS} (a step of at least PT${Math.ceil((end - start) / MAX_POINTS / 1000)}S)` }]);
    }
    return { start, end, stepMs };
  }

  function statsOf(version: { function_id: string; version_id: string }, rows: StatsRow[], window: Window): VersionStats {
    const { start, end, stepMs } = window;
    const steps = Array.from({ length: Math.ceil((end - start) / stepMs) }, () => new Sum());
    const total = new Sum();
    for (const row of rows) {
      total.add(row);
      steps[Math.floor((Date.parse(row.at) - start) / stepMs)]?.add(row);
    }
    return {
      functionId: version.function_id, functionVersionId: version.version_id,
      since: new Date(start).toISOString(), until: new Date(end).toISOString(),
      stepSeconds: stepMs / 1000, intervalSeconds: intervalMs / 1000,
      totals: total.numbers(end - start, Math.ceil((end - start) / intervalMs)),
      points: steps.map((sum, index) => {
        const at = start + index * stepMs;
        // The last step ends now: its rate is over the part that has passed.
        const ms = Math.min(stepMs, end - at);
        return { at: new Date(at).toISOString(), ...sum.numbers(ms, Math.ceil(ms / intervalMs)) };
      }),
    };
  }

  async function statsOfVersions(versions: { function_id: string; version_id: string }[], query: StatsQuery): Promise<VersionStats[]> {
    const window = windowOf(query);
    const rows = await options.repo.range(versions.map((version) => version.version_id), new Date(window.start).toISOString(), new Date(window.end).toISOString());
    return versions.map((version) => statsOf(version, rows.filter((row) => row.version_id === version.version_id), window));
  }

  return {
    async version(principal: Principal, functionId: string, versionId: string, query: StatsQuery): Promise<VersionStats> {
      const version = await options.functionsRepo.findVersion(principal.ncaId, functionId, versionId);
      if (!version) throw notFound(`Function id '${functionId}', version '${versionId}': not found`);
      return (await statsOfVersions([version], query))[0];
    },

    /** Every version of the function, newest first. */
    async function(principal: Principal, functionId: string, query: StatsQuery): Promise<VersionStats[]> {
      const versions = await options.functionsRepo.listVersionsOf(principal.ncaId, functionId);
      if (versions.length === 0) throw notFound(`Function id '${functionId}': not found`);
      return statsOfVersions(versions, query);
    },
  };
}

export type StatsService = ReturnType<typeof createStatsService>;
