// The task plane, composed: repo → scheduler → service → routes. main.ts mounts `routes` on the api
// host, hands `scheduler` to the agent hub (task messages of the agent link), and starts/stops it.
import path from 'node:path';
import type { Kysely } from 'kysely';
import type { Logger } from '../../logger.ts';
import type { SecretBox } from '../../store/encryption.ts';
import type { AccountsService } from '../accounts/service.ts';
import type { ClustersService } from '../clusters/service.ts';
import type { Database } from '../../store/schema.ts';
import type { TasksDatabase } from './migration.ts';
import { createTasksRepo } from './repo.ts';
import { createLocalBlobStore, type BlobStore } from '../../store/blobs.ts';
import { taskRoutes } from './routes.ts';
import { createTaskScheduler, type RegistrySecrets, type TaskHosts } from './scheduler.ts';
import { createTasksService } from './service.ts';
import type { TasksSettings } from './settings.ts';
import type { TelemetryReferenceCheck } from '../telemetries/service.ts';

export interface TasksPlaneOptions {
  db: Kysely<Database>;
  box: SecretBox;
  accounts: AccountsService;
  clusters: ClustersService;
  log: Logger;
  settings: TasksSettings;
  /** store.dataDir: the results directory defaults to <dataDir>/task-results. */
  dataDir: string;
  now?: () => Date;
  /** The nodes of clusters and what function instances hold on them (placement's instances). */
  hosts: TaskHosts;
  registry?: RegistrySecrets;
  results?: BlobStore;
  checkTelemetries?: TelemetryReferenceCheck;
  /** Told of a task's last lines when it fails (the telemetry export). */
  onOutput?: (taskId: string, instanceId: string, lines: string[]) => void;
}

export function createTasksPlane(options: TasksPlaneOptions) {
  const { settings } = options;
  const log = options.log.child({ component: 'tasks' });
  const repo = createTasksRepo(options.db.withTables<TasksDatabase>());
  const results = options.results ?? createLocalBlobStore(path.resolve(settings.resultsDir ?? path.join(options.dataDir, 'task-results')));
  const scheduler = createTaskScheduler({
    repo, clusters: options.clusters, box: options.box, log, now: options.now, hosts: options.hosts,
    registry: options.registry, intervalMs: settings.schedulerIntervalMs, agentLostAfterMs: settings.agentLostAfterSeconds * 1000,
    onOutput: options.onOutput,
  });
  const service = createTasksService({
    repo, scheduler, accounts: options.accounts, clusters: options.clusters, box: options.box, results,
    maxResultBytes: settings.maxResultBytes, now: options.now, checkTelemetries: options.checkTelemetries,
  });
  return {
    routes: taskRoutes(service),
    service,
    /** The agent hub's partner for task messages. */
    scheduler,
    start: () => scheduler.start(),
    stop: () => scheduler.stop(),
  };
}

export type TasksPlane = ReturnType<typeof createTasksPlane>;
