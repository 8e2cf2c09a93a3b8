// The platform's database: the foundation's tables and migrations (store/) with those of the planes that
// keep tables of their own (tasks, autoscaler, assets, telemetries, function stats, the placement lease,
// streaming sessions kept for a take-over). Every role opens the store through here, so each one
// migrates to the same history.
import { autoscalerMigration } from './autoscaler/migration.ts';
import { assetsMigration } from './control/assets/migration.ts';
import { versionDrainsMigration } from './control/deployments/drains.ts';
import { placementLeaseMigration } from './control/placement/migration.ts';
import { statsMigration } from './control/stats/migration.ts';
import { taskNodesMigration, tasksMigration } from './control/tasks/migration.ts';
import { telemetriesMigration } from './control/telemetries/migration.ts';
import { foundationMigrations } from './store/migrations.ts';
import { streamingSessionsMigration } from './streaming/session-records.ts';
import { openStore, type Dialect, type Store, type StoreOptions } from './store/store.ts';

export function platformMigrations(dialect: Dialect) {
  return {
    ...foundationMigrations(dialect), '0004_tasks': tasksMigration(dialect), '0005_autoscaler': autoscalerMigration(), '0007_assets': assetsMigration(),
    '0011_telemetries': telemetriesMigration(),
    '0012_function_stats': statsMigration(),
    '0013_placement_lease': placementLeaseMigration(dialect),
    '0014_version_drains': versionDrainsMigration(),
    '0015_streaming_sessions': streamingSessionsMigration(),
    '0016_task_nodes': taskNodesMigration(),
  };
}

export function openDatabase(options: StoreOptions): Promise<Store> {
  return openStore(options, platformMigrations);
}
