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
import type { Config } from '../config.ts';
import { createSettingsRepo } from '../control/installation/repo.ts';
import { ensureSealedSecret, loadSecretBox } from '../control/installation/service.ts';
import { isLoopbackHost } from '../http/host.ts';
import { createMetrics, metricsRoute, type MetricsSettings } from '../http/metrics.ts';
import { unauthorized } from '../domain/problem.ts';
import { createLogger } from '../logger.ts';
import { openDatabase } from '../database.ts';
import type { Kysely } from 'kysely';
import type { Database } from '../store/schema.ts';
import type { StoreOptions } from '../store/store.ts';
import { createAutoscalerPlane } from '../autoscaler/plane.ts';
import type { AutoscalerSettings } from '../autoscaler/settings.ts';

export interface AutoscalerRoleOptions {
  store: StoreOptions;
  settings: AutoscalerSettings;
  metrics?: MetricsSettings;
  /** The store's secrets key, to open the /metrics token generated for a listener off loopback. */
  secrets?: Config['secrets'];
  logLevel: string;
  logDestination?: DestinationStream;
  replicaId?: string;
}

export async function startAutoscalerRole(options: AutoscalerRoleOptions) {
  const log = createLogger(options.logLevel, options.logDestination);
  const store = await openDatabase(options.store);
  const metrics = createMetrics();
  // As the API replicas' (main.ts): off loopback, the bearer configured or the one generated for the installation.
  const token = options.metrics?.token ?? (isLoopbackHost(options.settings.host) ? undefined : await installationMetricsToken(store.db, options));
  const plane = createAutoscalerPlane({
    db: store.db, metrics, settings: { ...options.settings, enabled: true }, log, replicaId: options.replicaId,
  });
  const health = createHealthService([{ name: 'db_client', probe: () => store.ping() }, ...plane.health]);
  metrics.watchHealth(() => health.report());
  const app = createApp({
    routes: [...healthRoutes(health), metricsRoute(metrics, { token })], log, bodyLimit: '1kb', metrics, host: 'autoscaler',
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
    /** The bearer its /metrics wants, if any. */
    metricsToken: token,
    async close() {
      await plane.stop();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await store.close();
      log.flush();
    },
  };
}

/** The installation's /metrics token, made on the first start off loopback and kept sealed in the store. */
async function installationMetricsToken(db: Kysely<Database>, options: AutoscalerRoleOptions): Promise<string> {
  const settings = createSettingsRepo(db);
  const now = new Date().toISOString();
  const box = await loadSecretBox(settings, { key: options.secrets?.key, previousKeys: options.secrets?.previousKeys ?? [], dataDir: options.store.dataDir, now });
  return ensureSealedSecret(settings, box, 'metrics.token', now);
}
