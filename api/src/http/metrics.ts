// Prometheus metrics (prom-client) with one registry per platform, so several platforms in one process
// keep apart. GET /metrics serves them; Prometheus scrapes that, and the autoscaler's MetricsSource reads
// the same series (from this registry in-process, or back from Prometheus).
//
// Labels stay bounded: HTTP metrics carry the declared route template (never the raw path); function
// metrics carry account, function and version ids only once a request resolved to a real version, and a
// status class (2xx, 4xx, 5xx). Nothing here carries a credential, a header or a body.
import { createHash, timingSafeEqual } from 'node:crypto';
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { z } from 'zod';
import type { FunctionInstances, FunctionLoad, FunctionRef } from '../domain/load.ts';
import { unauthorized } from '../domain/problem.ts';
import { access } from './auth.ts';
import { RequestMetrics } from './request-metrics.ts';
import { route } from './route.ts';

export const metricsSettingsSchema = z.object({
  /**
   * GET /metrics wants `Authorization: Bearer <token>`. Unset, it answers without one on a listener bound to
   * loopback only; on any other a token is generated once and kept sealed in the store (control/installation).
   */
  token: z.string().min(16).optional(),
});

export type MetricsSettings = z.infer<typeof metricsSettingsSchema>;

export const metricsEnvSettings: Record<string, keyof MetricsSettings> = { SVC_METRICS_TOKEN: 'token' };

export interface HealthSnapshot {
  status: 'healthy' | 'unhealthy';
  components: Record<string, { status: 'healthy' | 'unhealthy' }>;
}

export const FUNCTION_LABELS = ['nca_id', 'function_id', 'function_version_id'] as const;
const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

const labelsOf = (ref: FunctionRef) => ({ nca_id: ref.ncaId, function_id: ref.functionId, function_version_id: ref.versionId });
const statusClass = (status: number) => `${Math.floor(status / 100)}xx`;

export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const loads: (() => Iterable<FunctionLoad>)[] = [];
  const instanceCounts: (() => Iterable<FunctionInstances>)[] = [];
  let health: (() => Promise<HealthSnapshot>) | undefined;

  const http = new RequestMetrics(registry, {
    counter: { name: 'svc_http_requests_total', help: 'HTTP requests answered, by host, route template and status' },
    histogram: { name: 'svc_http_request_duration_seconds', help: 'HTTP request duration until the response finished' },
  }, SECONDS_BUCKETS);
  const invocations = new RequestMetrics(registry, {
    counter: { name: 'svc_function_requests_total', help: 'Invocations (pexec) answered, by function version and status class' },
    histogram: { name: 'svc_function_request_duration_seconds', help: 'Invocation duration until answered (response finished, or 202)' },
  }, SECONDS_BUCKETS);

  const each = <T>(providers: (() => Iterable<T>)[], visit: (item: T) => void) => {
    for (const provider of providers) for (const item of provider()) visit(item);
  };
  // Gauges read the planes when scraped, so the request path pays nothing for them.
  new Gauge({
    name: 'svc_function_queue_depth', help: 'Requests waiting for a free instance slot', labelNames: FUNCTION_LABELS, registers: [registry],
    collect() { this.reset(); each(loads, (load) => this.set(labelsOf(load), load.queued)); },
  });
  new Gauge({
    name: 'svc_function_inflight_requests', help: 'Requests an instance is working on', labelNames: FUNCTION_LABELS, registers: [registry],
    collect() { this.reset(); each(loads, (load) => this.set(labelsOf(load), load.inflight)); },
  });
  new Gauge({
    name: 'svc_function_last_request_timestamp_seconds', help: 'When the latest invocation arrived (Unix seconds)', labelNames: FUNCTION_LABELS, registers: [registry],
    collect() {
      this.reset();
      each(loads, (load) => load.lastRequestAt !== undefined && this.set(labelsOf(load), load.lastRequestAt / 1000));
    },
  });
  new Gauge({
    name: 'svc_function_instances', help: 'Instances placement holds, by state (running: ready for requests; starting: not yet)',
    labelNames: [...FUNCTION_LABELS, 'state'], registers: [registry],
    collect() {
      this.reset();
      each(instanceCounts, (counts) => {
        this.set({ ...labelsOf(counts), state: 'running' }, counts.running);
        this.set({ ...labelsOf(counts), state: 'starting' }, counts.starting);
      });
    },
  });
  new Gauge({
    name: 'svc_health_component_status', help: 'Health of each component of /health: 1 healthy, 0 unhealthy', labelNames: ['component'], registers: [registry],
    async collect() {
      this.reset();
      if (!health) return;
      const report = await health();
      for (const [component, state] of Object.entries(report.components)) this.set({ component }, state.status === 'healthy' ? 1 : 0);
    },
  });

  return {
    registry,

    /** The gateway's per-request observation (http/app.ts). */
    observeHttp(host: string, method: string, routePath: string, status: number, seconds: number) {
      http.observe(`${host} ${method} ${routePath} ${status}`, () => ({ host, method, route: routePath, status: String(status) }), seconds);
    },

    /** One answered invocation of a resolved version (invocation/routes.ts). */
    observeInvocation(ref: FunctionRef, status: number, seconds: number) {
      const statusLabel = statusClass(status);
      invocations.observe(`${ref.versionId} ${ref.functionId} ${ref.ncaId} ${statusLabel}`, () => ({ ...labelsOf(ref), status: statusLabel }), seconds);
    },

    /** What the load gauges read, straight from the planes (the in-process MetricsSource). */
    snapshot(): { loads: FunctionLoad[]; instances: FunctionInstances[] } {
      const out = { loads: [] as FunctionLoad[], instances: [] as FunctionInstances[] };
      each(loads, (load) => out.loads.push(load));
      each(instanceCounts, (counts) => out.instances.push(counts));
      return out;
    },

    watchLoad(provider: () => Iterable<FunctionLoad>) {
      loads.push(provider);
    },

    watchInstances(provider: () => Iterable<FunctionInstances>) {
      instanceCounts.push(provider);
    },

    /** The /health report, probed at each scrape so the gauge is never stale. */
    watchHealth(report: () => Promise<HealthSnapshot>) {
      health = report;
    },
  };
}

export type PlatformMetrics = ReturnType<typeof createMetrics>;

const digest = (value: string) => createHash('sha256').update(value).digest();

/** GET /metrics in the Prometheus text format; with a token configured, only for that bearer. */
export function metricsRoute(metrics: PlatformMetrics, settings: MetricsSettings = {}) {
  const expected = settings.token ? digest(settings.token) : undefined;
  return route({
    method: 'GET', path: '/metrics', summary: 'Prometheus metrics (text exposition format)', tag: 'Metrics', access: access.public,
    responses: { 200: { description: 'Every metric of this process', schema: z.string(), contentType: 'text/plain' } },
    handle: async ({ req }, res) => {
      if (expected) {
        const given = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1];
        if (!given || !timingSafeEqual(digest(given), expected)) throw unauthorized('GET /metrics wants the metrics token (SVC_METRICS_TOKEN) as a bearer');
      }
      const text = await metrics.registry.metrics();
      res.writeHead(200, { 'content-type': metrics.registry.contentType });
      res.end(text);
      return undefined;
    },
  });
}
