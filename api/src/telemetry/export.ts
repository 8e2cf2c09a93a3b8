// The telemetry export: a function's invocations (one span each, with its request id, and its
// per-version metrics) and its log lines go to the telemetries its version names. The request path only
// appends a record to a bounded queue (or, once its version's telemetries are known to be down or none,
// counts a drop or does nothing); a timer hands the queue to each telemetry's exporter in batches. Nothing
// here is awaited by a request.
//
// Log lines: exportLogLines takes them from wherever they arrive: each followed version's new lines
// (log-feed.ts), a failed instance's last lines from its report (both wired in plane.ts), a failed
// task's (wired in main.ts).
import { Counter, type Registry } from 'prom-client';
import type { ExportTarget } from '../control/telemetries/service.ts';
import type { TelemetryReferences } from '../control/telemetries/schema.ts';
import type { FunctionRef } from '../domain/load.ts';
import { withoutSecrets, type Logger } from '../logger.ts';
import { createOtlpSink } from './otlp.ts';
import { createRemoteWriteSink } from './remote-write.ts';
import type { TelemetrySettings } from './settings.ts';
import type { InvocationRecord, LogLine, Signal, TelemetrySink } from './sink.ts';

/**
 * What the export reads about a function version or a task: its account, the attributes its log records
 * carry, the telemetries it names, and the secrets to blank out of its lines.
 */
export interface TelemetryOwner {
  ncaId: string;
  attributes: Record<string, string>;
  telemetries: TelemetryReferences;
  secrets: { value: unknown }[];
}

export interface TelemetrySources {
  /** A function version's or a task's; undefined when neither exists (any more). */
  owner(id: string): Promise<TelemetryOwner | undefined>;
  targets(ncaId: string, telemetryIds: string[]): Promise<ExportTarget[]>;
}

interface Route {
  /** Undefined when the id names nothing (records for it are left). */
  attributes?: Record<string, string>;
  logs?: TelemetrySink;
  metrics?: TelemetrySink;
  traces?: TelemetrySink;
  secrets: { value: unknown }[];
  /** Ms since epoch after which the version's telemetries are read again. */
  until: number;
}

type Pending = { kind: 'invocation'; record: InvocationRecord } | { kind: 'logs'; ownerId: string; lines: LogLine[] };

export interface TelemetryExportOptions {
  sources: TelemetrySources;
  settings: TelemetrySettings;
  log: Logger;
  registry?: Registry;
}

const ownerIdOf = (item: Pending) => item.kind === 'invocation' ? item.record.ref.versionId : item.ownerId;

export class TelemetryExport {
  readonly #sources: TelemetrySources;
  readonly #settings: TelemetrySettings;
  readonly #log: Logger;
  readonly #routes = new Map<string, Route>();
  readonly #sinks = new Map<string, { sink: TelemetrySink; fingerprint: string }>();
  #pending: Pending[] = [];
  #queueDropped = 0;
  #flushing: Promise<void> | undefined;
  readonly #timer: NodeJS.Timeout;

  constructor(options: TelemetryExportOptions) {
    this.#sources = options.sources;
    this.#settings = options.settings;
    this.#log = options.log.child({ component: 'telemetry' });
    this.#timer = setInterval(() => void this.flush(), this.#settings.flushMs);
    this.#timer.unref();
    if (options.registry) this.#registerMetrics(options.registry);
  }

  /** One answered invocation (the invocation plane's observer): queued, or dropped and counted, never awaited. */
  recordInvocation(ref: FunctionRef, requestId: string, status: number, seconds: number): void {
    const route = this.#routes.get(ref.versionId);
    if (route) {
      const { metrics, traces } = route;
      if (!metrics && !traces) return;
      if (!metrics?.health.accepting() && !traces?.health.accepting()) {
        metrics?.health.drop('metrics', 1);
        traces?.health.drop('traces', 1);
        return;
      }
    }
    this.#enqueue({ kind: 'invocation', record: { ref, requestId, status, seconds, endedAt: Date.now() } }, 1);
  }

  /**
   * Lines an instance of a function version (`ownerId` its version id) or a task (its task id) wrote, for
   * its LOGS telemetry. The plug-in point for any source of log lines; secrets' values are blanked before
   * they leave.
   */
  exportLogLines(ownerId: string, lines: LogLine[]): void {
    if (lines.length === 0) return;
    const route = this.#routes.get(ownerId);
    if (route && !route.logs) return;
    if (route?.logs && !route.logs.health.accepting()) return route.logs.health.drop('logs', lines.length);
    this.#enqueue({ kind: 'logs', ownerId, lines }, lines.length);
  }

  /** Stops exporting to a deleted telemetry at once (other replicas stop at their next refresh). */
  forget(telemetryId: string): void {
    const entry = this.#sinks.get(telemetryId);
    if (!entry) return;
    this.#sinks.delete(telemetryId);
    for (const [ownerId, route] of this.#routes) {
      if ([route.logs, route.metrics, route.traces].includes(entry.sink)) this.#routes.delete(ownerId);
    }
    void entry.sink.close();
  }

  /** Hands what is queued to the exporters (the timer calls it every flushMs). */
  flush(): Promise<void> {
    this.#flushing ??= this.#dispatch().catch((error: unknown) => {
      this.#log.warn({ err: error }, 'telemetry export round failed');
    }).finally(() => { this.#flushing = undefined; });
    return this.#flushing;
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.flush();
    const sinks = [...this.#sinks.values()];
    this.#sinks.clear();
    this.#routes.clear();
    await Promise.allSettled(sinks.map((entry) => entry.sink.close()));
  }

  #enqueue(item: Pending, items: number) {
    if (this.#pending.length >= this.#settings.maxQueue) {
      this.#queueDropped += items;
      return;
    }
    this.#pending.push(item);
  }

  async #dispatch() {
    const batch = this.#pending;
    this.#pending = [];
    const now = Date.now();
    await this.#refresh(new Set(batch.map(ownerIdOf)), now);
    const spans = new Map<TelemetrySink, InvocationRecord[]>();
    const counts = new Map<TelemetrySink, InvocationRecord[]>();
    const add = (into: Map<TelemetrySink, InvocationRecord[]>, sink: TelemetrySink | undefined, signal: Signal, record: InvocationRecord) => {
      if (!sink) return;
      if (!sink.health.accepting()) return sink.health.drop(signal, 1);
      const records = into.get(sink);
      if (records) records.push(record);
      else into.set(sink, [record]);
    };
    for (const item of batch) {
      const route = this.#routes.get(ownerIdOf(item));
      if (!route?.attributes) continue;
      if (item.kind === 'invocation') {
        add(spans, route.traces, 'traces', item.record);
        add(counts, route.metrics, 'metrics', item.record);
      } else if (route.logs) {
        if (!route.logs.health.accepting()) route.logs.health.drop('logs', item.lines.length);
        else route.logs.logs(route.attributes, this.#redacted(item.lines, route.secrets));
      }
    }
    for (const [sink, records] of spans) sink.spans(records);
    for (const [sink, records] of counts) sink.count(records);
  }

  /**
   * Reads the telemetries of the versions and tasks with queued records that are not known yet, and of every
   * known one whose reading is stale (a telemetry deleted on another replica then stops here too); a stale
   * one that names none is forgotten. Exporters nothing names any more are closed.
   */
  async #refresh(queued: Set<string>, now: number) {
    const stale = [...this.#routes].filter(([, route]) => route.until <= now).map(([versionId]) => versionId);
    const reading = [...queued].filter((versionId) => !this.#routes.has(versionId));
    for (const versionId of stale) {
      const route = this.#routes.get(versionId);
      if (!queued.has(versionId) && route && !route.logs && !route.metrics && !route.traces) this.#routes.delete(versionId);
      else reading.push(versionId);
    }
    if (reading.length === 0) return;
    for (const versionId of reading) await this.#resolve(versionId);
    const named = new Set([...this.#routes.values()].flatMap((route) => [route.logs, route.metrics, route.traces]));
    for (const [telemetryId, entry] of this.#sinks) {
      if (named.has(entry.sink)) continue;
      this.#sinks.delete(telemetryId);
      void entry.sink.close();
    }
  }

  #redacted(lines: LogLine[], secrets: { value: unknown }[]): LogLine[] {
    if (secrets.length === 0) return lines;
    const texts = withoutSecrets(lines.map((line) => line.text), secrets);
    return lines.map((line, index) => ({ ...line, text: texts[index] }));
  }

  async #resolve(ownerId: string) {
    const until = Date.now() + this.#settings.refreshMs;
    try {
      const owner = await this.#sources.owner(ownerId);
      const named = owner ? [...new Set(Object.values(owner.telemetries).filter((id) => id !== undefined))] : [];
      if (!owner || named.length === 0) {
        this.#routes.set(ownerId, { attributes: owner?.attributes, secrets: [], until });
        return;
      }
      const sinks = new Map((await this.#sources.targets(owner.ncaId, named)).map((target) => [target.telemetryId, this.#sinkFor(target)]));
      const { logsTelemetryId, metricsTelemetryId, tracesTelemetryId } = owner.telemetries;
      this.#routes.set(ownerId, {
        attributes: owner.attributes, secrets: owner.secrets, until,
        logs: logsTelemetryId ? sinks.get(logsTelemetryId) : undefined,
        metrics: metricsTelemetryId ? sinks.get(metricsTelemetryId) : undefined,
        traces: tracesTelemetryId ? sinks.get(tracesTelemetryId) : undefined,
      });
    } catch (error) {
      // Nothing goes out for the version until it can be read again.
      this.#log.warn({ err: error, ownerId }, 'could not read the telemetries of a function version or task');
      this.#routes.set(ownerId, { secrets: [], until: Date.now() + this.#settings.retryAfterMs });
    }
  }

  #sinkFor(target: ExportTarget): TelemetrySink {
    const fingerprint = JSON.stringify([target.endpoint, target.protocol, target.provider, target.types, target.secret]);
    const known = this.#sinks.get(target.telemetryId);
    if (known?.fingerprint === fingerprint) return known.sink;
    if (known) void known.sink.close();
    const sink = target.provider === 'PROMETHEUS' ? createRemoteWriteSink(target, this.#settings) : createOtlpSink(target, this.#settings);
    this.#sinks.set(target.telemetryId, { sink, fingerprint });
    return sink;
  }

  #registerMetrics(registry: Registry) {
    const sinks = this.#sinks;
    const perSink = (name: string, help: string, read: (sink: TelemetrySink) => Record<Signal, number>) => new Counter({
      name, help, labelNames: ['telemetry_id', 'signal'], registers: [registry],
      collect() {
        this.reset();
        for (const [telemetryId, { sink }] of sinks) {
          for (const [signal, value] of Object.entries(read(sink))) if (value > 0) this.inc({ telemetry_id: telemetryId, signal }, value);
        }
      },
    });
    perSink('svc_telemetry_exported_total', 'Spans, metric points and log records a telemetry endpoint accepted', (sink) => sink.health.exported);
    perSink('svc_telemetry_dropped_total', 'Spans, metric points and log records not exported: the endpoint failed or was down', (sink) => sink.health.dropped);
    const queue = () => this.#queueDropped;
    new Counter({
      name: 'svc_telemetry_queue_dropped_total', help: 'Records dropped because the export queue was full', registers: [registry],
      collect() {
        this.reset();
        if (queue() > 0) this.inc(queue());
      },
    });
  }
}
