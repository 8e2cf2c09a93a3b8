// OTLP receivers for tests: a real HTTP server (OTLP/HTTP) or gRPC server (OTLP/gRPC) on port 0 that
// decodes what it is sent (protobuf) with the protocol's field numbers (otlp-schema.ts) and keeps it.
// Either can be told to fail (503, UNAVAILABLE) to stand for an endpoint that is down.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { Server, ServerCredentials, status, type sendUnaryData, type ServerUnaryCall, type ServiceDefinition } from '@grpc/grpc-js';
import { OTLP_SIGNALS } from './otlp-schema.ts';

type Signal = keyof typeof OTLP_SIGNALS;

/** A decoded request as plain JSON: 64-bit numbers as strings, bytes as base64. */
function decode(signal: Signal, body: Buffer): Decoded {
  const type = OTLP_SIGNALS[signal].request;
  return type.toObject(type.decode(body), { longs: String, enums: String, bytes: String, defaults: false });
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
      received[signal].push({ ...decode(signal, body), headers: req.headers });
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

/** The same receiver over OTLP/gRPC: each signal's collector service (one unary Export), on a port of its own. */
export async function startOtlpGrpcReceiver(): Promise<OtlpReceiver> {
  const received: Record<Signal, Decoded[]> = { traces: [], metrics: [], logs: [] };
  const receiver: OtlpReceiver = { url: '', received, failing: false, close: async () => {} };
  const server = new Server();
  for (const signal of Object.keys(OTLP_SIGNALS) as Signal[]) {
    const definition: ServiceDefinition = {
      Export: {
        path: `/${OTLP_SIGNALS[signal].service}/Export`, requestStream: false, responseStream: false,
        requestDeserialize: (bytes: Buffer) => decode(signal, bytes), requestSerialize: () => Buffer.alloc(0),
        // Every Export*ServiceResponse with nothing partial in it is the empty message.
        responseSerialize: () => Buffer.alloc(0), responseDeserialize: () => ({}),
      },
    };
    server.addService(definition, {
      Export(call: ServerUnaryCall<Decoded, unknown>, done: sendUnaryData<unknown>) {
        if (receiver.failing) return done({ code: status.UNAVAILABLE, details: 'failing on purpose' });
        received[signal].push({ ...call.request, headers: call.metadata.getMap() });
        done(null, {});
      },
    });
  }
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(),
    (error, bound) => (error ? reject(error) : resolve(bound))));
  receiver.url = `http://127.0.0.1:${port}`;
  receiver.close = () => new Promise((resolve) => {
    server.tryShutdown(() => resolve());
    setTimeout(() => { server.forceShutdown(); resolve(); }, 1000).unref();
  });
  return receiver;
}
