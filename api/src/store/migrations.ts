// The schema's history. Append a migration; never edit one that has shipped.
import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

export const migrations: Record<string, Migration> = {
  '0001_foundation': {
    async up(db: Kysely<any>) {
      await db.schema.createTable('accounts')
        .addColumn('nca_id', 'text', (c) => c.primaryKey())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('admin_client_ids', 'text', (c) => c.notNull())
        .addColumn('max_functions', 'integer', (c) => c.notNull())
        .addColumn('max_tasks', 'integer', (c) => c.notNull())
        .addColumn('max_telemetries', 'integer', (c) => c.notNull())
        .addColumn('max_registry_credentials', 'integer', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createTable('credentials')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('nca_id', 'text', (c) => c.notNull().references('accounts.nca_id'))
        .addColumn('kind', 'text', (c) => c.notNull())
        .addColumn('secret_hash', 'text', (c) => c.unique())
        .addColumn('owner_type', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('issuer_service', 'text', (c) => c.notNull())
        .addColumn('issuer_id', 'text', (c) => c.notNull())
        .addColumn('description', 'text', (c) => c.notNull())
        .addColumn('audience_service_ids', 'text', (c) => c.notNull())
        .addColumn('authorizations', 'text', (c) => c.notNull())
        .addColumn('scopes', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('expires_at', 'text', (c) => c.notNull())
        .addColumn('revoked_at', 'text')
        .execute();
      await db.schema.createIndex('credentials_by_account').on('credentials').columns(['nca_id', 'created_at']).execute();
      await db.schema.createTable('settings')
        .addColumn('key', 'text', (c) => c.primaryKey())
        .addColumn('value', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
    },
  },
};
