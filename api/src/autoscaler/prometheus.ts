// The Prometheus MetricsSource: PromQL over the HTTP API's /api/v1/query_range (Prometheus, Thanos, Mimir,
// VictoriaMetrics), reading the series every api replica exports at /metrics, summed across replicas.
import { z } from 'zod';
import type { FunctionRef } from '../domain/load.ts';
import type { Sample } from './policy.ts';
import { TimeseriesError, type MetricsSource, type VersionLoad } from './source.ts';

export interface PrometheusOptions {
  /** Base URL; user:password@ in it becomes basic auth. */
  url: string;
  /** Bearer token (takes precedence over basic auth). */
  token?: string;
  timeoutMs: number;
  now: () => number;
}

const seriesSchema = z.object({ metric: z.record(z.string(), z.string()), values: z.array(z.tuple([z.number(), z.string()])) });

/** The query API's answer, as far as this source reads it. */
const answerSchema = z.object({
  status: z.string().optional(),
  error: z.string().optional(),
  data: z.object({ resultType: z.string(), result: z.array(seriesSchema) }).optional(),
});

type Series = z.infer<typeof seriesSchema>;

const BY_REF = 'nca_id, function_id, function_version_id';
/** Prometheus refuses more than 11,000 points per series. */
const MAX_POINTS = 10_000;

export function createPrometheusSource(options: PrometheusOptions): MetricsSource {
  const base = new URL(options.url);
  const headers: Record<string, string> = { accept: 'application/json' };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  else if (base.username) headers.authorization = `Basic ${Buffer.from(`${decodeURIComponent(base.username)}:${decodeURIComponent(base.password)}`).toString('base64')}`;
  base.username = '';
  base.password = '';
  const endpoint = new URL('api/v1/query_range', base.href.endsWith('/') ? base.href : `${base.href}/`);

  async function queryRange(query: string, startMs: number, endMs: number, stepSeconds: number): Promise<Series[]> {
    const url = new URL(endpoint);
    url.searchParams.set('query', query);
    url.searchParams.set('start', (startMs / 1000).toFixed(3));
    url.searchParams.set('end', (endMs / 1000).toFixed(3));
    url.searchParams.set('step', String(stepSeconds));
    let response: Response;
    try {
      response = await fetch(url, { headers, signal: AbortSignal.timeout(options.timeoutMs) });
    } catch (error) {
      const cause = (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).name;
      throw new TimeseriesError('network', `Prometheus unreachable (${cause})`);
    }
    const text = await response.text();
    if (response.status === 401 || response.status === 403) throw new TimeseriesError('auth', `Prometheus refused the credentials (${response.status})`);
    if (response.status >= 500) throw new TimeseriesError('server', `Prometheus failed the query (${response.status})`);
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw new TimeseriesError('client', `Prometheus answered ${response.status} without JSON`);
    }
    const answer = answerSchema.safeParse(value);
    if (!answer.success) throw new TimeseriesError('client', `Prometheus answered ${response.status} with JSON the query API does not give`);
    const { status, error, data } = answer.data;
    if (!response.ok || status !== 'success' || data?.resultType !== 'matrix') {
      throw new TimeseriesError('client', `Prometheus refused the query (${response.status}): ${(error ?? '').slice(0, 200)}`);
    }
    return data.result;
  }

  return {
    kind: 'prometheus',

    async discover(windowMs) {
      const end = options.now();
      const since = (end - windowMs) / 1000;
      const series = await queryRange(
        `(max by (${BY_REF}) (svc_function_last_request_timestamp_seconds) > ${since.toFixed(3)})`
        + ` or (sum by (${BY_REF}) (svc_function_instances) > 0)`
        + ` or (sum by (${BY_REF}) ({__name__=~"svc_function_inflight_requests|svc_function_queue_depth"}) > 0)`,
        end, end, 1,
      );
      const found = new Map<string, FunctionRef>();
      for (const { metric } of series) {
        if (metric.function_version_id) found.set(metric.function_version_id, { versionId: metric.function_version_id, ncaId: metric.nca_id, functionId: metric.function_id });
      }
      return [...found.values()];
    },

    async load(windowMs, stepMs) {
      const end = options.now();
      const start = end - windowMs;
      const step = Math.max(stepMs / 1000, windowMs / 1000 / MAX_POINTS);
      const [demand, instances, last] = await Promise.all([
        queryRange('sum by (function_version_id) ({__name__=~"svc_function_inflight_requests|svc_function_queue_depth"})', start, end, step),
        queryRange('sum by (function_version_id) (svc_function_instances)', start, end, step),
        queryRange('max by (function_version_id) (svc_function_last_request_timestamp_seconds)', end, end, 1),
      ]);
      // Align both series on their timestamps; a point missing on one side counts as zero.
      const byVersion = new Map<string, Map<number, Sample>>();
      const point = (versionId: string, at: number) => {
        let points = byVersion.get(versionId);
        if (!points) byVersion.set(versionId, points = new Map());
        let sample = points.get(at);
        if (!sample) points.set(at, sample = { at, demand: 0, instances: 0 });
        return sample;
      };
      for (const { metric, values } of demand) for (const [at, value] of values) point(metric.function_version_id, Math.round(at * 1000)).demand = Number(value);
      for (const { metric, values } of instances) for (const [at, value] of values) point(metric.function_version_id, Math.round(at * 1000)).instances = Number(value);
      const out = new Map<string, VersionLoad>();
      for (const [versionId, points] of byVersion) out.set(versionId, { samples: [...points.values()].sort((a, b) => a.at - b.at) });
      for (const { metric, values } of last) {
        const latest = values[values.length - 1];
        if (!latest) continue;
        const entry = out.get(metric.function_version_id) ?? { samples: [] };
        entry.lastInvocationAt = Number(latest[1]) * 1000;
        out.set(metric.function_version_id, entry);
      }
      return out;
    },

    async ping() {
      const end = options.now();
      await queryRange('vector(1)', end, end, 1);
    },
  };
}
