// Graceful undeploys in progress: the migration api/src/database.ts registers as '0014_version_drains', and
// its repo. The replica that takes the DELETE writes the row before it deletes the deployment, so whichever
// replica runs placement (now or after a take-over) keeps the version's instances until its running
// requests end or the row's deadline passes, and then deletes the row.
import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

export interface VersionDrainsTable {
  version_id: string;
  /** ISO 8601 UTC: the instances stop by then whatever still runs. */
  until: string;
}

// A type alias, not an interface: Kysely's withTables<T>() needs its index signature.
export type VersionDrainsDatabase = { version_drains: VersionDrainsTable };

export function versionDrainsMigration(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.createTable('version_drains').ifNotExists()
        .addColumn('version_id', 'text', (c) => c.primaryKey())
        .addColumn('until', 'text', (c) => c.notNull())
        .execute();
    },
  };
}

export function createDrainsRepo(db: Kysely<VersionDrainsDatabase>) {
  return {
    async start(versionId: string, until: string): Promise<void> {
      await db.insertInto('version_drains').values({ version_id: versionId, until })
        .onConflict((conflict) => conflict.column('version_id').doUpdateSet({ until })).execute();
    },
    /** Version id → its deadline. */
    async list(): Promise<Map<string, string>> {
      return new Map((await db.selectFrom('version_drains').selectAll().execute()).map((row) => [row.version_id, row.until]));
    },
    async end(versionId: string): Promise<void> {
      await db.deleteFrom('version_drains').where('version_id', '=', versionId).execute();
    },
  };
}

export type DrainsRepo = ReturnType<typeof createDrainsRepo>;
