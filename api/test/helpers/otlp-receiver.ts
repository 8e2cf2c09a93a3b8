// An OTLP/HTTP receiver for tests: a real HTTP server on port 0 that decodes what it is sent (protobuf)
// with the OpenTelemetry protocol's own definitions (fixtures/otlp-proto) and keeps it. It can be told to
// fail (503) to stand for an endpoint that is down.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import protobuf from 'protobufjs';

const PROTO_DIR = path.resolve(import.meta.dirname, '../fixtures/otlp-proto');
const services = {
  traces: ['collector/trace/v1/trace_service.proto', 'opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest'],
  metrics: ['collector/metrics/v1/metrics_service.proto', 'opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest'],
  logs: ['collector/logs/v1/logs_service.proto', 'opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest'],
} as const;

type Signal = keyof typeof services;

function loadTypes(): Record<Signal, protobuf.Type> {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => path.join(PROTO_DIR, target);
  root.loadSync(Object.values(services).map(([file]) => `opentelemetry/proto/${file}`), { keepCase: false });
  return Object.fromEntries(Object.entries(services).map(([signal, [, type]]) => [signal, root.lookupType(type)])) as Record<Signal, protobuf.Type>;
}

/** A decoded export request: the message as plain JSON (ids as hex, 64-bit numbers as strings). */
export type Decoded = Record<string, any>;

export interface OtlpReceiver {
  url: string;
  received: Record<Signal, Decoded[]>;
  /** Answer 503 to every export while true. */
  failing: boolean;
  close(): Promise<void>;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const types = loadTypes();
  const received: Record<Signal, Decoded[]> = { traces: [], metrics: [], logs: [] };
  const receiver: OtlpReceiver = { url: '', received, failing: false, close: async () => {} };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const signal = (req.url ?? '').match(/^\/v1\/(traces|metrics|logs)$/)?.[1] as Signal | undefined;
      if (req.method !== 'POST' || !signal) return void res.writeHead(404).end();
      if (receiver.failing) return void res.writeHead(503).end();
      let body = Buffer.concat(chunks);
      if (req.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
      const message = types[signal].decode(body);
      received[signal].push({ ...types[signal].toObject(message, { longs: String, enums: String, bytes: String, defaults: false }), headers: req.headers });
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  receiver.close = () => new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
  return receiver;
}

/** Every attribute list's key/value pairs as a plain object (OTLP's KeyValue with an AnyValue). */
export function attributesOf(list: { key: string; value: Record<string, unknown> }[] = []): Record<string, unknown> {
  return Object.fromEntries(list.map(({ key, value }) => [key, Object.values(value)[0]]));
}
