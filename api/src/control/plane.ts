// The management plane as main.ts composes it: the installation's sealed secrets, accounts (with the
// bootstrap account), who may call (control/keys/plane.ts), clusters (with the local one), functions,
// deployments, registry credentials, telemetries and input assets. The sweeper of expired asset uploads
// runs from here on: main.ts stops it (assets.stop) with the platform.
import path from 'node:path';
import type { Kysely } from 'kysely';
import type { Config } from '../config.ts';
import { createPathSigner } from '../domain/signed-paths.ts';
import type { Logger } from '../logger.ts';
import { createLocalBlobStore } from '../store/blobs.ts';
import type { Database } from '../store/schema.ts';
import { createAccountsRepo } from './accounts/repo.ts';
import { createAccountsService } from './accounts/service.ts';
import type { AssetsDatabase } from './assets/migration.ts';
import { createAssetsRepo } from './assets/repo.ts';
import { createAssetsService } from './assets/service.ts';
import { createNodesRepo } from './clusters/nodes.ts';
import { createClustersRepo } from './clusters/repo.ts';
import { createClustersService } from './clusters/service.ts';
import { createDeploymentsRepo } from './deployments/repo.ts';
import { createDeploymentsService } from './deployments/service.ts';
import { createFunctionsRepo } from './functions/repo.ts';
import { createFunctionsService } from './functions/service.ts';
import { createSettingsRepo } from './installation/repo.ts';
import { ensureLocalCluster, ensureSealedSecret, loadSecretBox, type SealedSecretName } from './installation/service.ts';
import { createKeysPlane } from './keys/plane.ts';
import { createRegistryRepo } from './registry/repo.ts';
import { createRegistryService } from './registry/service.ts';
import type { TelemetriesDatabase } from './telemetries/migration.ts';
import { createTelemetriesRepo } from './telemetries/repo.ts';
import { createTelemetriesService } from './telemetries/service.ts';

export interface ControlPlaneParts {
  config: Config;
  db: Kysely<Database>;
  log: Logger;
  now: () => Date;
  /** A telemetry was deleted: the export forgets it (made after this plane, hence a callback). */
  forgetTelemetry(telemetryId: string): void;
}

export async function createControlPlane(parts: ControlPlaneParts) {
  const { config, db, log, now } = parts;
  const settings = createSettingsRepo(db);
  const startedAt = now().toISOString();
  const box = await loadSecretBox(settings, { ...config.secrets, dataDir: config.store.dataDir, now: startedAt });
  /** An installation-wide secret, made and sealed in the store on first use (the same on every replica). */
  const sealed = (name: SealedSecretName) => ensureSealedSecret(settings, box, name, startedAt);

  const accounts = createAccountsService(createAccountsRepo(db), now);
  const { account } = await accounts.ensureBootstrapAccount(config.api.accountBootstrap);
  const { bootstrap, adminSigningKeyFile, verifier, keys, routes: keyRoutes } = await createKeysPlane({
    config, db, settings, box, accounts, defaultAccountId: account.ncaId, now,
  });
  const nodesRepo = createNodesRepo(db, log);
  const clusters = createClustersService(createClustersRepo(db, log), nodesRepo, now);
  const localCluster = config.compute.localCluster.enabled
    ? await ensureLocalCluster(settings, clusters, box, { ...config.compute.localCluster, ncaId: account.ncaId, now: startedAt })
    : undefined;
  const functionsRepo = createFunctionsRepo(db);
  const deploymentsRepo = createDeploymentsRepo(db, log);
  const telemetries = createTelemetriesService({
    repo: createTelemetriesRepo(db.withTables<TelemetriesDatabase>()), accounts, box, now,
    allowInternalEndpoints: config.telemetry.allowInternalEndpoints, onDelete: parts.forgetTelemetry,
  });
  const functions = createFunctionsService({ repo: functionsRepo, accounts, box, now, checkTelemetries: telemetries.checkReferences });
  const deployments = createDeploymentsService(deploymentsRepo, functions, clusters, accounts, now);
  const registry = createRegistryService(createRegistryRepo(db), accounts, box, now);
  const blobs = createLocalBlobStore(path.resolve(config.assets.dir ?? path.join(config.store.dataDir, 'blobs')));
  const signer = createPathSigner(await sealed('urls.signing_key'), () => now().getTime());
  const assets = createAssetsService({
    repo: createAssetsRepo(db.withTables<AssetsDatabase>()), blobs, signer, settings: config.assets, accounts, now,
  });
  assets.start(60_000, (error) => log.warn({ err: error }, 'could not sweep expired asset uploads'));
  return {
    sealed, box, accounts, defaultAccount: account, bootstrap, adminSigningKeyFile, verifier, keys, keyRoutes,
    nodesRepo, clusters, localCluster, functionsRepo, deploymentsRepo, telemetries, functions, deployments, registry, blobs, signer, assets,
  };
}

export type ControlPlane = Awaited<ReturnType<typeof createControlPlane>>;
