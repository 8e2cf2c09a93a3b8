// The schema's history. Append a migration; never edit one that has shipped.
import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

/**
 * The foundation's migrations for one backend; binary columns are bytea on PostgreSQL, blob on SQLite. The
 * planes' own (0004 tasks, 0005 autoscaler) are added by api/src/database.ts: names sort into one history.
 */
export function foundationMigrations(dialect: 'sqlite' | 'postgres'): Record<string, Migration> {
  const binary = dialect === 'postgres' ? 'bytea' : 'blob';
  return {
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
    '0002_function_lifecycle': {
      async up(db: Kysely<any>) {
        await db.schema.createTable('functions')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('nca_id', 'text', (c) => c.notNull().references('accounts.nca_id'))
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addUniqueConstraint('functions_name_per_account', ['nca_id', 'name'])
          .execute();
        await db.schema.createTable('function_versions')
          .addColumn('version_id', 'text', (c) => c.primaryKey())
          .addColumn('function_id', 'text', (c) => c.notNull().references('functions.id'))
          .addColumn('nca_id', 'text', (c) => c.notNull())
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('function_type', 'text', (c) => c.notNull())
          .addColumn('status', 'text', (c) => c.notNull())
          .addColumn('document', 'text', (c) => c.notNull())
          .addColumn('secrets', 'text')
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('updated_at', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('function_versions_by_account').on('function_versions').columns(['nca_id', 'created_at', 'version_id']).execute();
        await db.schema.createIndex('function_versions_by_function').on('function_versions').columns(['function_id', 'created_at']).execute();
        await db.schema.createTable('deployments')
          .addColumn('deployment_id', 'text', (c) => c.primaryKey())
          .addColumn('function_id', 'text', (c) => c.notNull())
          .addColumn('version_id', 'text', (c) => c.notNull().unique().references('function_versions.version_id'))
          .addColumn('nca_id', 'text', (c) => c.notNull())
          .addColumn('specs', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('updated_at', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createTable('registry_credentials')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('nca_id', 'text', (c) => c.notNull().references('accounts.nca_id'))
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('hostname', 'text', (c) => c.notNull())
          .addColumn('artifact_types', 'text', (c) => c.notNull())
          .addColumn('tags', 'text', (c) => c.notNull())
          .addColumn('description', 'text', (c) => c.notNull())
          .addColumn('secret', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('updated_at', 'text', (c) => c.notNull())
          .addUniqueConstraint('registry_credentials_name_per_account', ['nca_id', 'name'])
          .execute();
        await db.schema.createTable('clusters')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('nca_id', 'text', (c) => c.notNull().references('accounts.nca_id'))
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('group_id', 'text', (c) => c.notNull())
          .addColumn('group_name', 'text', (c) => c.notNull())
          .addColumn('description', 'text', (c) => c.notNull())
          .addColumn('cloud_provider', 'text', (c) => c.notNull())
          .addColumn('region', 'text', (c) => c.notNull())
          .addColumn('authorized_nca_ids', 'text', (c) => c.notNull())
          .addColumn('capabilities', 'text', (c) => c.notNull())
          .addColumn('attributes', 'text', (c) => c.notNull())
          .addColumn('gpus', 'text', (c) => c.notNull())
          .addColumn('agent_version', 'text', (c) => c.notNull())
          .addColumn('agent_credential_hash', 'text', (c) => c.notNull().unique())
          .addColumn('k8s_version', 'text')
          .addColumn('last_connected_at', 'text')
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('updated_at', 'text', (c) => c.notNull())
          .addUniqueConstraint('clusters_name_per_account', ['nca_id', 'name'])
          .execute();
      },
    },
    '0003_execution_plane': {
      async up(db: Kysely<any>) {
        await db.schema.createTable('instances')
          .addColumn('instance_id', 'text', (c) => c.primaryKey())
          .addColumn('nca_id', 'text', (c) => c.notNull())
          .addColumn('function_id', 'text', (c) => c.notNull())
          .addColumn('version_id', 'text', (c) => c.notNull())
          .addColumn('cluster_id', 'text', (c) => c.notNull())
          .addColumn('gpu_spec_id', 'text', (c) => c.notNull())
          .addColumn('gpu', 'text', (c) => c.notNull())
          .addColumn('instance_type', 'text', (c) => c.notNull())
          .addColumn('state', 'text', (c) => c.notNull())
          .addColumn('desired', 'integer', (c) => c.notNull())
          .addColumn('endpoint', 'text')
          .addColumn('restarts', 'integer', (c) => c.notNull())
          .addColumn('message', 'text')
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('updated_at', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('instances_by_version').on('instances').columns(['version_id']).execute();
        await db.schema.createIndex('instances_by_cluster').on('instances').columns(['cluster_id']).execute();
        await db.schema.createTable('invocations')
          .addColumn('request_id', 'text', (c) => c.primaryKey())
          .addColumn('nca_id', 'text', (c) => c.notNull())
          .addColumn('function_id', 'text', (c) => c.notNull())
          .addColumn('version_id', 'text', (c) => c.notNull())
          .addColumn('state', 'text', (c) => c.notNull())
          .addColumn('request', 'text', (c) => c.notNull())
          .addColumn('body', binary, (c) => c.notNull())
          .addColumn('result', 'text')
          .addColumn('result_body', binary)
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('updated_at', 'text', (c) => c.notNull())
          .execute();
      },
    },
    '0006_account_instance_quota': {
      async up(db: Kysely<any>) {
        // Existing accounts get the default of api.accountBootstrap.limits.maxInstances.
        await db.schema.alterTable('accounts').addColumn('max_instances', 'integer', (c) => c.notNull().defaultTo(100)).execute();
      },
    },
    '0008_account_asset_quota': {
      async up(db: Kysely<any>) {
        // Existing accounts get the defaults of api.accountBootstrap.limits.maxAssets and .maxAssetBytes (10 GiB).
        await db.schema.alterTable('accounts').addColumn('max_assets', 'integer', (c) => c.notNull().defaultTo(1000)).execute();
        await db.schema.alterTable('accounts').addColumn('max_asset_bytes', 'bigint', (c) => c.notNull().defaultTo(10 * 1024 ** 3)).execute();
      },
    },
    '0009_cluster_isolation': {
      async up(db: Kysely<any>) {
        await db.schema.alterTable('clusters').addColumn('unisolated_reason', 'text').execute();
      },
    },
    '0010_hosts': {
      async up(db: Kysely<any>) {
        // One row per agent (node) of a cluster; its lease is the placement process's, mirrored here for
        // every replica's cluster status. Instances placed before this migration have no node: the first
        // node of their cluster that reports them adopts them.
        await db.schema.createTable('nodes')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('cluster_id', 'text', (c) => c.notNull())
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('gpus', 'text', (c) => c.notNull())
          .addColumn('agent_version', 'text', (c) => c.notNull())
          .addColumn('generation', 'integer', (c) => c.notNull())
          .addColumn('linked', 'integer', (c) => c.notNull())
          .addColumn('lease_expires_at', 'text')
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('updated_at', 'text', (c) => c.notNull())
          .addUniqueConstraint('nodes_name_per_cluster', ['cluster_id', 'name'])
          .execute();
        await db.schema.alterTable('instances').addColumn('node_id', 'text').execute();
      },
    },
  };
}
