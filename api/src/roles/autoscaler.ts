// `svc autoscaler`: the autoscaler on its own, for running it apart from the API replicas (several of
// these elect one leader through the store's discovery lock). It serves only its health endpoints and
// /metrics; desired counts reach placement through the store. The API replicas then run with
// SVC_AUTOSCALER=false, and the load comes from Prometheus (SVC_PROMETHEUS_URL): this process has none.
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { DestinationStream } from 'pino';
import { healthRoutes } from '../control/health/routes.ts';
import { createHealthService } from '../control/health/service.ts';
import { createApp } from '../http/app.ts';
import { createMetrics, metricsRoute, type MetricsSettings } from '../http/metrics.ts';
import { unauthorized } from '../domain/problem.ts';
import { createLogger } from '../logger.ts';
import { openDatabase } from '../database.ts';
import type { StoreOptions } from '../store/store.ts';
import { createAutoscalerPlane } from '../autoscaler/plane.ts';
import type { AutoscalerSettings } from '../autoscaler/settings.ts';

export interface AutoscalerRoleOptions {
  store: StoreOptions;
  settings: AutoscalerSettings;
  metrics?: MetricsSettings;
  logLevel: string;
  logDestination?: DestinationStream;
  replicaId?: string;
}

export async function startAutoscalerRole(options: AutoscalerRoleOptions) {
  const log = createLogger(options.logLevel, options.logDestination);
  const store = await openDatabase(options.store);
  const metrics = createMetrics();
  const plane = createAutoscalerPlane({
    db: store.db, metrics, settings: { ...options.settings, enabled: true }, log, replicaId: options.replicaId,
  });
  const health = createHealthService([{ name: 'db_client', probe: () => store.ping() }, ...plane.health]);
  metrics.watchHealth(() => health.report());
  const app = createApp({
    routes: [...healthRoutes(health), metricsRoute(metrics, options.metrics)], log, bodyLimit: '1kb', metrics, host: 'autoscaler',
    // Every route here is public; a bearer is never checked.
    verifier: { verify: async () => { throw unauthorized('this listener takes no credentials'); } },
  });
  const server = http.createServer(app);
  await once(server.listen(options.settings.port, options.settings.host), 'listening');
  const port = (server.address() as AddressInfo).port;
  plane.start();
  log.info({ port, replicaId: plane.autoscaler?.replicaId, source: plane.source.kind }, 'autoscaler listening');
  return {
    port,
    replicaId: plane.autoscaler!.replicaId,
    async close() {
      await plane.stop();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await store.close();
      log.flush();
    },
  };
}
