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
  /** Log lines (LOGS) of a function version or a task, with the attributes that name it. */
  logs(attributes: Record<string, string>, lines: LogLine[]): void;
  close(): Promise<void>;
}

/** Asks the endpoint whether it takes exports again: an empty export request, true on a 2xx. */
export type Probe = () => Promise<boolean>;

/**
 * Up or down, and what went out and what was dropped, per signal. Once an export failed the endpoint is
 * down: nothing is sent to it, and every retryAfterMs a timer sends one empty export request (the probe)
 * to ask whether it is back. So a down endpoint costs a request one field read and a count, and one small
 * request per period; no span is built for it.
 */
export class SinkHealth {
  readonly exported: Record<Signal, number> = { logs: 0, metrics: 0, traces: 0 };
  readonly dropped: Record<Signal, number> = { logs: 0, metrics: 0, traces: 0 };
  #down = false;
  #probeTimer: NodeJS.Timeout | undefined;
  #stopped = false;
  readonly #retryAfterMs: number;
  readonly #probe: Probe;

  constructor(retryAfterMs: number, probe: Probe) {
    this.#retryAfterMs = retryAfterMs;
    this.#probe = probe;
  }

  /** False while the endpoint is known down. */
  accepting(): boolean {
    return !this.#down;
  }

  succeeded(signal: Signal, items: number) {
    this.exported[signal] += items;
    this.#down = false;
  }

  failed(signal: Signal, items: number) {
    this.dropped[signal] += items;
    this.#down = true;
    this.#scheduleProbe();
  }

  drop(signal: Signal, items: number) {
    this.dropped[signal] += items;
  }

  stop() {
    this.#stopped = true;
    clearTimeout(this.#probeTimer);
  }

  #scheduleProbe() {
    if (this.#probeTimer || this.#stopped) return;
    this.#probeTimer = setTimeout(() => {
      void this.#probe().catch(() => false).then((up) => {
        this.#probeTimer = undefined;
        if (up) this.#down = false;
        else if (this.#down) this.#scheduleProbe();
      });
    }, this.#retryAfterMs);
    this.#probeTimer.unref();
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
export function versionAttributes(ref: FunctionRef): Record<string, string> {
  return { 'svc.nca_id': ref.ncaId, 'svc.function.id': ref.functionId, 'svc.function.version.id': ref.versionId };
}
