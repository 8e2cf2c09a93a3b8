// What every telemetry's exporter shares: the records it takes, its health (an endpoint that failed is
// left alone for a while, and what would have gone there is dropped and counted), and the headers its
// secret turns into.
import { hostname } from 'node:os';
import type { FunctionRef } from '../domain/load.ts';
import type { TelemetrySecretValue, TelemetryType } from '../control/telemetries/schema.ts';

/** One answered invocation, as the invocation plane saw it. */
export interface InvocationRecord {
  ref: FunctionRef;
  requestId: string;
  status: number;
  seconds: number;
  /** Ms since epoch when it was answered. */
  endedAt: number;
}

/** One line an instance or task wrote. */
export interface LogLine {
  text: string;
  /** Ms since epoch; the time it was exported when unknown. */
  at?: number;
  stream?: 'stdout' | 'stderr';
  instanceId?: string;
}

export type Signal = 'logs' | 'metrics' | 'traces';
export const signalOf: Record<TelemetryType, Signal> = { LOGS: 'logs', METRICS: 'metrics', TRACES: 'traces' };

/** One telemetry's exporter. */
export interface TelemetrySink {
  readonly health: SinkHealth;
  /** One span per invocation (TRACES). */
  spans(records: InvocationRecord[]): void;
  /** The version's request counter and duration histogram (METRICS). */
  count(records: InvocationRecord[]): void;
  /** Log lines (LOGS). */
  logs(ref: FunctionRef, lines: LogLine[]): void;
  close(): Promise<void>;
}

/** Up or down, and what went out and what was dropped, per signal. */
export class SinkHealth {
  readonly exported: Record<Signal, number> = { logs: 0, metrics: 0, traces: 0 };
  readonly dropped: Record<Signal, number> = { logs: 0, metrics: 0, traces: 0 };
  #downUntil = 0;
  readonly #retryAfterMs: number;

  constructor(retryAfterMs: number) {
    this.#retryAfterMs = retryAfterMs;
  }

  /** False while the endpoint is known down. */
  accepting(now = Date.now()): boolean {
    return now >= this.#downUntil;
  }

  succeeded(signal: Signal, items: number) {
    this.exported[signal] += items;
    this.#downUntil = 0;
  }

  failed(signal: Signal, items: number) {
    this.dropped[signal] += items;
    this.#downUntil = Date.now() + this.#retryAfterMs;
  }

  drop(signal: Signal, items: number) {
    this.dropped[signal] += items;
  }
}

/** The HTTP headers a telemetry's secret stands for (control/telemetries/schema.ts telemetrySecretValueSchema). */
export function authHeaders(secret: TelemetrySecretValue): Record<string, string> {
  if (typeof secret === 'string') return { Authorization: `Bearer ${secret}` };
  if ('headers' in secret) return { ...secret.headers };
  const [user, password] = 'username' in secret ? [secret.username, secret.password] : [String(secret.instanceId), secret.apiKey];
  return { Authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` };
}

/**
 * Which process exported a series or span: several API replicas each export their own invocations, and
 * their cumulative counters must not be written as one series.
 */
export const EXPORTER_INSTANCE = `${hostname()}/${process.pid}`;

/** The attributes every exported record of a version carries. */
export function versionAttributes(ref: FunctionRef) {
  return { 'svc.nca_id': ref.ncaId, 'svc.function.id': ref.functionId, 'svc.function.version.id': ref.versionId };
}
