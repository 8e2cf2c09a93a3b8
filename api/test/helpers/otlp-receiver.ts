// OTLP receivers for tests: a real HTTP server (OTLP/HTTP) or gRPC server (OTLP/gRPC) on port 0 that
// decodes what it is sent (protobuf) with the OpenTelemetry protocol's own definitions (fixtures/otlp-proto)
// and keeps it. Either can be told to fail (503, UNAVAILABLE) to stand for an endpoint that is down.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { loadPackageDefinition, Server, ServerCredentials, status, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
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

/** The same receiver over OTLP/gRPC: the collector services of the same definitions, on a port of its own. */
export async function startOtlpGrpcReceiver(): Promise<OtlpReceiver> {
  const definitions = loadSync(Object.values(services).map(([file]) => `opentelemetry/proto/${file}`), {
    includeDirs: [PROTO_DIR], keepCase: false, longs: String, enums: String, bytes: String, defaults: false, oneofs: false,
  });
  const loaded = loadPackageDefinition(definitions) as any;
  const collector = loaded.opentelemetry.proto.collector;
  const received: Record<Signal, Decoded[]> = { traces: [], metrics: [], logs: [] };
  const receiver: OtlpReceiver = { url: '', received, failing: false, close: async () => {} };
  const handler = (signal: Signal) => ({
    Export(call: ServerUnaryCall<Decoded, unknown>, done: sendUnaryData<unknown>) {
      if (receiver.failing) return done({ code: status.UNAVAILABLE, details: 'failing on purpose' });
      received[signal].push({ ...call.request, headers: call.metadata.getMap() });
      done(null, {});
    },
  });
  const server = new Server();
  server.addService(collector.trace.v1.TraceService.service, handler('traces'));
  server.addService(collector.metrics.v1.MetricsService.service, handler('metrics'));
  server.addService(collector.logs.v1.LogsService.service, handler('logs'));
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(),
    (error, bound) => (error ? reject(error) : resolve(bound))));
  receiver.url = `http://127.0.0.1:${port}`;
  receiver.close = () => new Promise((resolve) => {
    server.tryShutdown(() => resolve());
    setTimeout(() => { server.forceShutdown(); resolve(); }, 1000).unref();
  });
  return receiver;
}
