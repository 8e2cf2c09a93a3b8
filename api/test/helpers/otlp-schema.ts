// The part of the OpenTelemetry protocol (OTLP v1) the telemetry tests read, written down here from the
// protocol's field numbers: the export requests of the three signals down to spans, metric points and log
// records, their attributes and resource. Fields not listed are skipped when decoding, so a receiver built
// on it reads what any OTLP exporter sends; a wrong number here would fail the tests' decoding.
import protobuf from 'protobufjs';

type Fields = Record<string, { id: number; type: string; rule?: 'repeated' }>;
const field = (id: number, type: string, rule?: 'repeated') => ({ id, type, ...(rule ? { rule } : {}) });
const repeated = (id: number, type: string) => field(id, type, 'repeated');

const messages: Record<string, Fields> = {
  AnyValue: {
    stringValue: field(1, 'string'), boolValue: field(2, 'bool'), intValue: field(3, 'int64'), doubleValue: field(4, 'double'),
    bytesValue: field(7, 'bytes'),
  },
  KeyValue: { key: field(1, 'string'), value: field(2, 'AnyValue') },
  InstrumentationScope: { name: field(1, 'string'), version: field(2, 'string') },
  Resource: { attributes: repeated(1, 'KeyValue') },

  ExportTraceServiceRequest: { resourceSpans: repeated(1, 'ResourceSpans') },
  ResourceSpans: { resource: field(1, 'Resource'), scopeSpans: repeated(2, 'ScopeSpans') },
  ScopeSpans: { scope: field(1, 'InstrumentationScope'), spans: repeated(2, 'Span') },
  Span: {
    traceId: field(1, 'bytes'), spanId: field(2, 'bytes'), name: field(5, 'string'), kind: field(6, 'int32'),
    startTimeUnixNano: field(7, 'fixed64'), endTimeUnixNano: field(8, 'fixed64'), attributes: repeated(9, 'KeyValue'),
    status: field(15, 'Status'),
  },
  Status: { message: field(2, 'string'), code: field(3, 'int32') },

  ExportMetricsServiceRequest: { resourceMetrics: repeated(1, 'ResourceMetrics') },
  ResourceMetrics: { resource: field(1, 'Resource'), scopeMetrics: repeated(2, 'ScopeMetrics') },
  ScopeMetrics: { scope: field(1, 'InstrumentationScope'), metrics: repeated(2, 'Metric') },
  Metric: {
    name: field(1, 'string'), description: field(2, 'string'), unit: field(3, 'string'), gauge: field(5, 'Gauge'),
    sum: field(7, 'Sum'), histogram: field(9, 'Histogram'),
  },
  Gauge: { dataPoints: repeated(1, 'NumberDataPoint') },
  Sum: { dataPoints: repeated(1, 'NumberDataPoint'), aggregationTemporality: field(2, 'int32'), isMonotonic: field(3, 'bool') },
  NumberDataPoint: {
    startTimeUnixNano: field(2, 'fixed64'), timeUnixNano: field(3, 'fixed64'), asDouble: field(4, 'double'),
    asInt: field(6, 'sfixed64'), attributes: repeated(7, 'KeyValue'),
  },
  Histogram: { dataPoints: repeated(1, 'HistogramDataPoint'), aggregationTemporality: field(2, 'int32') },
  HistogramDataPoint: {
    startTimeUnixNano: field(2, 'fixed64'), timeUnixNano: field(3, 'fixed64'), count: field(4, 'fixed64'), sum: field(5, 'double'),
    bucketCounts: repeated(6, 'fixed64'), explicitBounds: repeated(7, 'double'), attributes: repeated(9, 'KeyValue'),
  },

  ExportLogsServiceRequest: { resourceLogs: repeated(1, 'ResourceLogs') },
  ResourceLogs: { resource: field(1, 'Resource'), scopeLogs: repeated(2, 'ScopeLogs') },
  ScopeLogs: { scope: field(1, 'InstrumentationScope'), logRecords: repeated(2, 'LogRecord') },
  LogRecord: {
    timeUnixNano: field(1, 'fixed64'), severityNumber: field(2, 'int32'), severityText: field(3, 'string'), body: field(5, 'AnyValue'),
    attributes: repeated(6, 'KeyValue'), traceId: field(9, 'bytes'), spanId: field(10, 'bytes'), observedTimeUnixNano: field(11, 'fixed64'),
  },
};

const root = protobuf.Root.fromJSON({ nested: Object.fromEntries(Object.entries(messages).map(([name, fields]) => [name, { fields }])) });

/** Each signal's export request and the gRPC service that takes it (`/<service>/Export`). */
export const OTLP_SIGNALS = {
  traces: { request: root.lookupType('ExportTraceServiceRequest'), service: 'opentelemetry.proto.collector.trace.v1.TraceService' },
  metrics: { request: root.lookupType('ExportMetricsServiceRequest'), service: 'opentelemetry.proto.collector.metrics.v1.MetricsService' },
  logs: { request: root.lookupType('ExportLogsServiceRequest'), service: 'opentelemetry.proto.collector.logs.v1.LogsService' },
} as const;
