// A telemetry exported over OTLP (HTTP with protobuf, or gRPC) with the OpenTelemetry JS SDK: one span per invocation
// carrying its request id, the version's request counter and duration histogram, and its log lines.
// The SDK batches (its span and log processors, the periodic metric reader); every exporter is wrapped
// so that a failed export marks the endpoint down (SinkHealth) and counts what it carried as dropped.
import { SpanKind, SpanStatusCode, ValueType, type Attributes } from '@opentelemetry/api';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { Metadata } from '@grpc/grpc-js';
import { OTLPLogExporter as GrpcLogExporter } from '@opentelemetry/exporter-logs-otlp-grpc';
import { OTLPLogExporter } from '@opentelemetry/exporter-logs-otlp-proto';
import { OTLPMetricExporter as GrpcMetricExporter } from '@opentelemetry/exporter-metrics-otlp-grpc';
import { OTLPMetricExporter } from '@opentelemetry/exporter-metrics-otlp-proto';
import { OTLPTraceExporter as GrpcTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchLogRecordProcessor, LoggerProvider, type LogRecordExporter, type ReadableLogRecord } from '@opentelemetry/sdk-logs';
import { MeterProvider, PeriodicExportingMetricReader, type PushMetricExporter, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import { BatchSpanProcessor, TracerProvider, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace';
import type { ExportTarget } from '../control/telemetries/service.ts';
import type { TelemetrySettings } from './settings.ts';
import {
  authHeaders, EXPORTER_INSTANCE, SinkHealth, signalOf, versionAttributes, type InvocationRecord, type LogLine, type Signal, type TelemetrySink,
} from './sink.ts';

const SCOPE = 'svc';

type Callback = (result: ExportResult) => void;

const attributesOf = (record: InvocationRecord): Attributes => ({ ...versionAttributes(record.ref), 'http.response.status_code': record.status });

function observed(health: SinkHealth, signal: Signal, items: number, done: Callback): Callback {
  return (result) => {
    if (result.code === ExportResultCode.SUCCESS) health.succeeded(signal, items);
    else health.failed(signal, items);
    done(result);
  };
}

function watchedSpans(inner: SpanExporter, health: SinkHealth): SpanExporter {
  return {
    export: (spans: ReadableSpan[], done) => inner.export(spans, observed(health, 'traces', spans.length, done)),
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
}

function watchedLogs(inner: LogRecordExporter, health: SinkHealth): LogRecordExporter {
  return {
    export: (records: ReadableLogRecord[], done) => inner.export(records, observed(health, 'logs', records.length, done)),
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
}

function watchedMetrics(inner: OTLPMetricExporter | GrpcMetricExporter, health: SinkHealth): PushMetricExporter {
  const points = (metrics: ResourceMetrics) => metrics.scopeMetrics.reduce((sum, scope) =>
    sum + scope.metrics.reduce((count, metric) => count + metric.dataPoints.length, 0), 0);
  return {
    export: (metrics, done) => inner.export(metrics, observed(health, 'metrics', points(metrics), done)),
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush(),
    selectAggregationTemporality: (type) => inner.selectAggregationTemporality(type),
  };
}

/** The three OTLP exporters of one telemetry, over HTTP (protobuf) or gRPC as it says. */
function exportersFor(target: ExportTarget, timeoutMillis: number) {
  const headers = authHeaders(target.secret);
  if (target.protocol === 'GRPC') {
    // The endpoint is the collector's address (http://host:4317; https for TLS); headers travel as metadata.
    const metadata = new Metadata();
    for (const [name, value] of Object.entries(headers)) metadata.set(name.toLowerCase(), value);
    const options = { url: target.endpoint, metadata, timeoutMillis };
    return { traces: new GrpcTraceExporter(options), metrics: new GrpcMetricExporter(options), logs: new GrpcLogExporter(options) };
  }
  // OTLP/HTTP: the endpoint is the base the signal paths are added to, as OTEL_EXPORTER_OTLP_ENDPOINT.
  const base = target.endpoint.replace(/\/+$/, '');
  const options = (signal: Signal) => ({ url: `${base}/v1/${signal}`, headers, timeoutMillis });
  return { traces: new OTLPTraceExporter(options('traces')), metrics: new OTLPMetricExporter(options('metrics')), logs: new OTLPLogExporter(options('logs')) };
}

export function createOtlpSink(target: ExportTarget, settings: TelemetrySettings): TelemetrySink {
  const exporters = exportersFor(target, settings.timeoutMs);
  const resource = resourceFromAttributes({ 'service.name': 'svc', 'service.instance.id': EXPORTER_INSTANCE, 'svc.telemetry.id': target.telemetryId });
  // The probe: an empty export request (no resource) is valid OTLP, which a collector accepts.
  const probeWith: Record<Signal, (done: Callback) => void> = {
    traces: (done) => exporters.traces.export([], done),
    logs: (done) => exporters.logs.export([], done),
    metrics: (done) => exporters.metrics.export({ resource, scopeMetrics: [] }, done),
  };
  const probe = probeWith[signalOf[target.types[0]]];
  const health = new SinkHealth(settings.retryAfterMs, () => new Promise((resolve) => probe((result) => resolve(result.code === ExportResultCode.SUCCESS))));
  const batching = { maxQueueSize: settings.maxQueue, scheduledDelayMillis: settings.flushMs, exportTimeoutMillis: settings.timeoutMs };
  const types = new Set(target.types);

  const tracing = types.has('TRACES') ? new TracerProvider({
    resource, spanProcessors: [new BatchSpanProcessor({ exporter: watchedSpans(exporters.traces, health), ...batching })],
  }) : undefined;
  const tracer = tracing?.getTracer(SCOPE);

  const metering = types.has('METRICS') ? new MeterProvider({
    resource,
    readers: [new PeriodicExportingMetricReader({
      exporter: watchedMetrics(exporters.metrics, health),
      exportIntervalMillis: settings.metricsIntervalMs, exportTimeoutMillis: Math.min(settings.timeoutMs, settings.metricsIntervalMs),
    })],
  }) : undefined;
  const meter = metering?.getMeter(SCOPE);
  const requests = meter?.createCounter('svc.function.requests', { description: 'Invocations answered, by version and status', valueType: ValueType.INT });
  const durations = meter?.createHistogram('svc.function.request.duration', { description: 'Invocation duration until answered', unit: 's' });

  const logging = types.has('LOGS') ? new LoggerProvider({
    resource, processors: [new BatchLogRecordProcessor({ exporter: watchedLogs(exporters.logs, health), ...batching })],
  }) : undefined;
  const logger = logging?.getLogger(SCOPE);

  return {
    health,

    spans(records: InvocationRecord[]) {
      if (!tracer) return;
      for (const record of records) {
        const span = tracer.startSpan('invoke', {
          kind: SpanKind.SERVER, startTime: record.endedAt - record.seconds * 1000,
          attributes: { ...attributesOf(record), 'svc.request_id': record.requestId },
        });
        if (record.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
        span.end(record.endedAt);
      }
    },

    count(records: InvocationRecord[]) {
      for (const record of records) {
        const attributes = attributesOf(record);
        requests?.add(1, attributes);
        durations?.record(record.seconds, attributes);
      }
    },

    logs(owner: Record<string, string>, lines: LogLine[]) {
      if (!logger) return;
      for (const line of lines) {
        logger.emit({
          timestamp: line.at ?? Date.now(), body: line.text,
          attributes: {
            ...owner,
            ...(line.stream ? { 'log.iostream': line.stream } : {}), ...(line.instanceId ? { 'svc.instance.id': line.instanceId } : {}),
          },
        });
      }
    },

    async close() {
      health.stop();
      await Promise.allSettled([tracing?.shutdown(), metering?.shutdown(), logging?.shutdown()]);
    },
  };
}
