// The telemetries table: the migration api/src/database.ts registers as '0011_telemetries', and its row
// type (the telemetries repo reaches it with db.withTables<TelemetriesDatabase>()).
import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

export interface TelemetriesTable {
  telemetry_id: string;
  nca_id: string;
  name: string;
  endpoint: string;
  protocol: string;
  provider: string;
  /** JSON list of LOGS, METRICS, TRACES. */
  types: string;
  /** The secret's name (shown); its value is sealed in `secret`. */
  secret_name: string;
  /** SecretBox-sealed JSON of the secret's value. */
  secret: string;
  created_at: string;
}

// A type alias, not an interface: Kysely's withTables<T>() needs its index signature.
export type TelemetriesDatabase = { telemetries: TelemetriesTable };

export function telemetriesMigration(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.createTable('telemetries').ifNotExists()
        .addColumn('telemetry_id', 'text', (c) => c.primaryKey())
        .addColumn('nca_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('endpoint', 'text', (c) => c.notNull())
        .addColumn('protocol', 'text', (c) => c.notNull())
        .addColumn('provider', 'text', (c) => c.notNull())
        .addColumn('types', 'text', (c) => c.notNull())
        .addColumn('secret_name', 'text', (c) => c.notNull())
        .addColumn('secret', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addUniqueConstraint('telemetries_name_per_account', ['nca_id', 'name'])
        .execute();
    },
  };
}
