// A child process running `svc autoscaler` (startAutoscalerRole) for the replica tests: argv[2] is JSON
// {store, settings, replicaId}. Prints one line {"port": N} once listening; a SIGKILL is its crash.
// TEMPORARY step: runs the autoscaler migration with its own table until store/migrations.ts registers it.
import { Migrator } from 'kysely/migration';
import { autoscalerMigration } from '../../src/autoscaler/migration.ts';
import { startAutoscalerRole } from '../../src/autoscaler/role.ts';
import { autoscalerSettingsSchema } from '../../src/autoscaler/settings.ts';
import { openStore } from '../../src/store/store.ts';

const { store, settings, replicaId } = JSON.parse(process.argv[2]);
const migrating = await openStore(store);
const { error } = await new Migrator({
  db: migrating.db, migrationTableName: 'svc_autoscaler_migration', migrationLockTableName: 'svc_autoscaler_migration_lock',
  provider: { getMigrations: async () => ({ '0005_autoscaler': autoscalerMigration() }) },
}).migrateToLatest();
await migrating.close();
if (error) throw error;
const role = await startAutoscalerRole({ store, settings: autoscalerSettingsSchema.parse(settings), logLevel: 'warn', replicaId });
console.log(JSON.stringify({ port: role.port }));
process.on('SIGTERM', () => void role.close().then(() => process.exit(0)));
