// The assets table: the migration api/src/database.ts registers as '0007_assets', and its row type (the
// assets repo reaches it with db.withTables<AssetsDatabase>()).
import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

export interface AssetsTable {
  asset_id: string;
  nca_id: string;
  content_type: string;
  description: string;
  /** Bytes stored; null until the upload arrived (the asset does not exist for the API before). */
  size: number | null;
  uploaded_at: string | null;
  created_at: string;
}

// A type alias, not an interface: Kysely's withTables<T>() needs its index signature.
export type AssetsDatabase = { assets: AssetsTable };

export function assetsMigration(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.createTable('assets').ifNotExists()
        .addColumn('asset_id', 'text', (c) => c.primaryKey())
        .addColumn('nca_id', 'text', (c) => c.notNull())
        .addColumn('content_type', 'text', (c) => c.notNull())
        .addColumn('description', 'text', (c) => c.notNull())
        .addColumn('size', 'bigint')
        .addColumn('uploaded_at', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('assets_by_account').ifNotExists().on('assets').columns(['nca_id', 'created_at']).execute();
    },
  };
}
