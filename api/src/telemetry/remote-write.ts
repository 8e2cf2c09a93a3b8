// A PROMETHEUS telemetry: the version's series pushed by Prometheus remote-write (protobuf WriteRequest,
// snappy-compressed) every metricsIntervalMs. The series are cumulative, as a scrape of /metrics would
// give them: requests by status class, and the duration histogram; `instance` names the exporting process
// (host/pid), so several API replicas write series of their own (sum them by version).
//
// Encoding is the `prometheus-remote-write` package's (its WriteRequest protobuf and snappyjs, both plain
// JavaScript, no native build): OpenTelemetry JS has no remote-write exporter, and the platform's own
// prom-client registry is for /metrics, shared by every account.
import { pushTimeseries } from 'prometheus-remote-write';
import type { ExportTarget } from '../control/telemetries/service.ts';
import type { FunctionRef } from '../domain/load.ts';
import type { TelemetrySettings } from './settings.ts';
import { authHeaders, EXPORTER_INSTANCE, SinkHealth, type InvocationRecord, type TelemetrySink } from './sink.ts';

/** An empty WriteRequest, snappy-compressed: the block format's length varint 0 and nothing after it. */
const EMPTY_WRITE_REQUEST = new Uint8Array([0]);

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

interface VersionSeries {
  labels: Record<string, string>;
  requests: Map<string, number>;
  buckets: number[];
  count: number;
  sum: number;
}

type Timeseries = Extract<Parameters<typeof pushTimeseries>[0], unknown[]>[number];

function seriesOf(version: VersionSeries, at: number): Timeseries[] {
  const one = (name: string, value: number, extra: Record<string, string> = {}): Timeseries =>
    ({ labels: { __name__: name, ...version.labels, ...extra }, samples: [{ value, timestamp: at }] });
  return [
    ...[...version.requests].map(([status, value]) => one('svc_function_requests_total', value, { status })),
    ...BUCKETS.map((le, index) => one('svc_function_request_duration_seconds_bucket', version.buckets[index], { le: String(le) })),
    one('svc_function_request_duration_seconds_bucket', version.count, { le: '+Inf' }),
    one('svc_function_request_duration_seconds_count', version.count),
    one('svc_function_request_duration_seconds_sum', version.sum),
  ];
}

export function createRemoteWriteSink(target: ExportTarget, settings: TelemetrySettings): TelemetrySink {
  const versions = new Map<string, VersionSeries>();
  const headers = { ...authHeaders(target.secret), 'Content-Encoding': 'snappy', 'X-Prometheus-Remote-Write-Version': '0.1.0', 'User-Agent': 'svc' };
  const health = new SinkHealth(settings.retryAfterMs, async () => (await fetch(target.endpoint, {
    method: 'POST', headers: { ...headers, 'Content-Type': 'application/x-protobuf' }, body: EMPTY_WRITE_REQUEST, signal: AbortSignal.timeout(settings.timeoutMs),
  })).ok);
  const fetchWithTimeout = (url: string, init?: { method: string; headers: Record<string, string>; body: ArrayBufferLike }) =>
    fetch(url, { method: init?.method, headers: init?.headers, body: init?.body ? new Uint8Array(init.body) : undefined, signal: AbortSignal.timeout(settings.timeoutMs) });
  let pushing: Promise<void> | undefined;

  function versionOf(ref: FunctionRef): VersionSeries {
    let version = versions.get(ref.versionId);
    if (!version) {
      version = {
        labels: { nca_id: ref.ncaId, function_id: ref.functionId, function_version_id: ref.versionId, instance: EXPORTER_INSTANCE },
        requests: new Map(), buckets: BUCKETS.map(() => 0), count: 0, sum: 0,
      };
      versions.set(ref.versionId, version);
    }
    return version;
  }

  async function push() {
    const at = Date.now();
    const series = [...versions.values()].flatMap((version) => seriesOf(version, at));
    if (series.length === 0) return;
    try {
      const result = await pushTimeseries(series, { url: target.endpoint, headers, fetch: fetchWithTimeout, console: undefined });
      if (result.status >= 200 && result.status < 300) health.succeeded('metrics', series.length);
      else health.failed('metrics', series.length);
    } catch {
      health.failed('metrics', series.length);
    }
  }

  const timer = setInterval(() => {
    pushing ??= push().finally(() => { pushing = undefined; });
  }, settings.metricsIntervalMs);
  timer.unref();

  return {
    health,

    spans() {
      // Remote-write carries metrics only (a PROMETHEUS telemetry's types are METRICS alone).
    },

    count(records: InvocationRecord[]) {
      for (const record of records) {
        const version = versionOf(record.ref);
        const status = `${Math.floor(record.status / 100)}xx`;
        version.requests.set(status, (version.requests.get(status) ?? 0) + 1);
        BUCKETS.forEach((le, index) => {
          if (record.seconds <= le) version.buckets[index] += 1;
        });
        version.count += 1;
        version.sum += record.seconds;
      }
    },

    logs() {
      // As spans.
    },

    async close() {
      clearInterval(timer);
      health.stop();
      await pushing;
    },
  };
}
