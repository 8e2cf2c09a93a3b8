// The autoscaler, composed for main.ts (and for `svc autoscaler`): store tables, metrics, the metrics
// source (in-process, or Prometheus with SVC_PROMETHEUS_URL), the deployment path, the loops, the status
// route, the timeseries_db_client health component, and what placement reads (desired counts, waking).
import type { Kysely } from 'kysely';
import { createDeploymentsRepo } from '../control/deployments/repo.ts';
import { createFunctionsRepo } from '../control/functions/repo.ts';
import type { HealthComponent } from '../control/health/service.ts';
import type { PlatformMetrics } from '../http/metrics.ts';
import type { Logger } from '../logger.ts';
import type { Database } from '../store/schema.ts';
import { createAutoscaler } from './autoscaler.ts';
import { createAutoscalerMetrics } from './metrics.ts';
import type { AutoscalerDatabase } from './migration.ts';
import { createScalingPlatform } from './platform.ts';
import { createPrometheusSource } from './prometheus.ts';
import { createAutoscalerRepo } from './repo.ts';
import { autoscalerRoutes } from './routes.ts';
import type { AutoscalerSettings } from './settings.ts';
import { createInProcessSource, instrumented } from './source.ts';
import { createScalingStatus } from './status.ts';

export interface AutoscalerPlaneOptions {
  /** The store's handle (the autoscaler tables are its own: AutoscalerDatabase). */
  db: Kysely<Database>;
  metrics: PlatformMetrics;
  settings: AutoscalerSettings;
  log: Logger;
  now?: () => Date;
  replicaId?: string;
}

/** A function version as placement names it when it wakes one from zero. */
export interface WakingVersion {
  versionId: string;
  ncaId: string;
  functionId: string;
}

export function createAutoscalerPlane(options: AutoscalerPlaneOptions) {
  const { settings } = options;
  const now = options.now ?? (() => new Date());
  const repo = createAutoscalerRepo(options.db.withTables<AutoscalerDatabase>());
  const metrics = createAutoscalerMetrics(options.metrics.registry);
  const source = instrumented(settings.prometheusUrl
    ? createPrometheusSource({ url: settings.prometheusUrl, token: settings.prometheusToken, timeoutMs: settings.prometheusTimeoutMs, now: () => now().getTime() })
    : createInProcessSource(options.metrics, () => now().getTime()), metrics);
  const appliedListeners: (() => void)[] = [];
  const platform = createScalingPlatform({
    deployments: createDeploymentsRepo(options.db, options.log), versions: createFunctionsRepo(options.db), repo, metrics,
    applied: () => appliedListeners.forEach((listener) => listener()),
  });
  const autoscaler = settings.enabled
    ? createAutoscaler({ repo, source, platform, metrics, settings, log: options.log, now, replicaId: options.replicaId })
    : undefined;

  return {
    /** The loops; undefined when they run in another process (autoscaler.enabled false). */
    autoscaler,
    source,

    /** For placement (control/instances `desired`): always the store's counts, wherever the loops run. */
    desiredCounts: {
      async load(): Promise<Map<string, number>> {
        return new Map((await repo.desired()).map((row) => [row.gpu_spec_id, row.desired]));
      },
      wake: (version: WakingVersion, gpuSpecId: string, at: string) => repo.wake(version, gpuSpecId, at),
    },

    /**
     * /health's timeseries_db_client (healthy while the metrics source answers), only where the loops run:
     * an API replica whose autoscaler runs elsewhere stays ready through a Prometheus outage.
     */
    health: (autoscaler ? [{ name: 'timeseries_db_client', probe: () => source.ping() }] : []) satisfies HealthComponent[],

    routes: autoscalerRoutes(createScalingStatus(repo, platform, options.metrics, settings.platformPolicy)),

    /** A scaling round now (sessions started or ended: spare instances should follow at once), where the loops run. */
    nudge() {
      autoscaler?.nudge();
    },

    /** Called after desired counts were written (main.ts: prompt placement). */
    onApplied(listener: () => void) {
      appliedListeners.push(listener);
    },

    start() {
      autoscaler?.start();
    },

    stop() {
      return autoscaler?.stop() ?? Promise.resolve();
    },
  };
}

export type AutoscalerPlane = ReturnType<typeof createAutoscalerPlane>;
