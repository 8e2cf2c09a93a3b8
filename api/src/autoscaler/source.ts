// MetricsSource: where the autoscaler reads load from. Two implementations read the same series
// (http/metrics.ts): in-process from this platform's registry (the embedded default), or Prometheus'
// HTTP API when SVC_PROMETHEUS_URL is set (N replicas behind one timeseries database).
import type { PlatformMetrics } from '../http/metrics.ts';
import type { FunctionRef } from '../domain/load.ts';
import type { AutoscalerMetrics } from './metrics.ts';
import type { Sample } from './policy.ts';

export interface VersionLoad {
  /** Oldest first, the last one taken now. */
  samples: Sample[];
  /** Ms since epoch; undefined when the source knows of none. */
  lastInvocationAt?: number;
}

export interface MetricsSource {
  readonly kind: 'in-process' | 'prometheus';
  /** Versions invoked within `windowMs`, or holding instances now. */
  discover(windowMs: number): Promise<FunctionRef[]>;
  /** Every version's samples over the last `windowMs`, about one per `stepMs`. */
  load(windowMs: number, stepMs: number): Promise<Map<string, VersionLoad>>;
  /** Health probe: resolves when the source answers. */
  ping(): Promise<void>;
}

/** A failed query, classed for the failure counters. The message never carries the URL or a credential. */
export class TimeseriesError extends Error {
  override name = 'TimeseriesError';
  readonly kind: 'auth' | 'server' | 'client' | 'network';

  constructor(kind: TimeseriesError['kind'], message: string) {
    super(message);
    this.kind = kind;
  }
}

/** Counts and times every call; failures raise the error, auth-failure and server-side-failure counters. */
export function instrumented(source: MetricsSource, metrics: AutoscalerMetrics): MetricsSource {
  async function timed<T>(call: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      const result = await call();
      metrics.timeseriesRequests.inc({ status: 'ok' });
      return result;
    } catch (error) {
      metrics.timeseriesRequests.inc({ status: 'error' });
      const kind = (error as TimeseriesError).kind;
      if (kind === 'auth') metrics.timeseriesAuthFailures.inc();
      if (kind === 'server') metrics.timeseriesServerFailures.inc();
      throw error;
    } finally {
      metrics.timeseriesDuration.observe(performance.now() - started);
    }
  }
  return {
    kind: source.kind,
    discover: (windowMs) => timed(() => source.discover(windowMs)),
    load: (windowMs, stepMs) => timed(() => source.load(windowMs, stepMs)),
    ping: () => timed(() => source.ping()),
  };
}

interface Snapshot extends FunctionRef {
  demand: number;
  instances: number;
  lastInvocationAt?: number;
}

/** The longest history kept per version (stickiness windows are at most PT1H). */
const HISTORY_MS = 3_600_000;
const HISTORY_SAMPLES = 4000;

/**
 * Reads this process's own metrics: the values its load and instance gauges report, taken from the same
 * providers without formatting them. History for stickiness is what this source sampled itself: one sample
 * per load() call, i.e. per scaling round of this replica.
 */
export function createInProcessSource(metrics: PlatformMetrics, now: () => number): MetricsSource {
  const history = new Map<string, Sample[]>();

  async function snapshot(): Promise<Map<string, Snapshot>> {
    const { loads, instances } = metrics.snapshot();
    const out = new Map<string, Snapshot>();
    const entry = (ref: FunctionRef) => {
      let found = out.get(ref.versionId);
      if (!found) {
        found = { versionId: ref.versionId, ncaId: ref.ncaId, functionId: ref.functionId, demand: 0, instances: 0 };
        out.set(ref.versionId, found);
      }
      return found;
    };
    for (const load of loads) {
      const found = entry(load);
      found.demand += load.queued + load.inflight;
      if (load.lastRequestAt !== undefined) found.lastInvocationAt = Math.max(found.lastInvocationAt ?? 0, load.lastRequestAt);
    }
    for (const counts of instances) entry(counts).instances += counts.running + counts.starting;
    return out;
  }

  return {
    kind: 'in-process',

    async discover(windowMs) {
      const since = now() - windowMs;
      return [...(await snapshot()).values()]
        .filter((version) => version.instances > 0 || version.demand > 0 || (version.lastInvocationAt ?? 0) >= since)
        .map(({ versionId, ncaId, functionId }) => ({ versionId, ncaId, functionId }));
    },

    async load(windowMs) {
      const at = now();
      const current = await snapshot();
      const out = new Map<string, VersionLoad>();
      for (const versionId of new Set([...current.keys(), ...history.keys()])) {
        const seen = current.get(versionId);
        const samples = history.get(versionId) ?? [];
        // A version gone from the registry with nothing but idle history left is forgotten.
        if (!seen && samples.every((sample) => sample.demand === 0 && sample.instances === 0)) {
          history.delete(versionId);
          continue;
        }
        samples.push({ at, demand: seen?.demand ?? 0, instances: seen?.instances ?? 0 });
        while (samples.length > HISTORY_SAMPLES || (samples.length > 0 && samples[0].at < at - HISTORY_MS)) samples.shift();
        history.set(versionId, samples);
        out.set(versionId, { samples: samples.filter((sample) => sample.at >= at - windowMs), lastInvocationAt: seen?.lastInvocationAt });
      }
      return out;
    },

    async ping() {},
  };
}
