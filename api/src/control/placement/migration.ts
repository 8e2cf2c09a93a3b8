// The placement lease's row (lease.ts): the migration api/src/database.ts registers as '0013_placement_lease'
// and its row type (reached with db.withTables<PlacementDatabase>()). One row per role; today only 'placement'.
import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

export interface PlacementLeaseTable {
  name: string;
  /** The replica that holds it (its replica id). */
  holder: string;
  /** Where the other replicas reach the holder (gateway.replicaUrl): they hand streaming sessions over to it. */
  address: string;
  /** Grows by one each time another term begins: the fencing token placement's writes and commands carry. */
  epoch: number;
  /** The database's clock: the lease is free once this has passed. */
  expires_at: Date;
}

// A type alias, not an interface: Kysely's withTables<T>() needs its index signature.
export type PlacementDatabase = { placement_lease: PlacementLeaseTable };

export function placementLeaseMigration(dialect: 'sqlite' | 'postgres'): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.createTable('placement_lease')
        .addColumn('name', 'text', (c) => c.primaryKey())
        .addColumn('holder', 'text', (c) => c.notNull())
        .addColumn('address', 'text', (c) => c.notNull())
        .addColumn('epoch', 'integer', (c) => c.notNull())
        // Only PostgreSQL installations elect (config.ts); SQLite gets the table for one history.
        .addColumn('expires_at', dialect === 'postgres' ? 'timestamptz' : 'text', (c) => c.notNull())
        .execute();
    },
  };
}
