// The autoscaler's tables: the migration api/src/database.ts registers as '0005_autoscaler', and their row
// types (the plane reaches them with db.withTables<AutoscalerDatabase>()). Idempotent (if not exists), so a
// store that ran it before it was registered runs it again harmlessly.
import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

/** Leases: the discovery lock is the row named 'discovery'. Times are ISO 8601 UTC text. */
export interface AutoscalerLocksTable {
  name: string;
  holder: string;
  acquired_at: string;
  expires_at: string;
}

/** The active set: function versions discovery found, and the autoscaler's last decision for each. */
export interface AutoscalerFunctionsTable {
  version_id: string;
  nca_id: string;
  function_id: string;
  discovered_at: string;
  /** Refreshed by every discovery round that still sees the version; it leaves the set after the TTL. */
  last_seen_at: string;
  /** Idle expiry: scale to zero is allowed once this is older than the idle window. */
  last_invocation_at: string | null;
  /** The last decision (total over the version's GPU specifications), and why. */
  desired: number | null;
  instances: number | null;
  utilization: number | null;
  reason: string | null;
  detail: string | null;
  decided_at: string | null;
  /** The function status it was skipped in; not looked at again until the status changes. */
  skipped_status: string | null;
}

/** Desired instances per GPU specification: what placement (control/instances) starts and stops toward. */
export interface AutoscalerDesiredTable {
  gpu_spec_id: string;
  version_id: string;
  desired: number;
  updated_at: string;
  /** When placement raised it from zero for a waiting request; a decision taken before that does not lower it. */
  woken_at: string | null;
}

// A type alias, not an interface: Kysely's withTables<T>() needs its index signature.
export type AutoscalerDatabase = {
  autoscaler_locks: AutoscalerLocksTable;
  autoscaler_functions: AutoscalerFunctionsTable;
  autoscaler_desired: AutoscalerDesiredTable;
};

export function autoscalerMigration(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.createTable('autoscaler_locks').ifNotExists()
        .addColumn('name', 'text', (c) => c.primaryKey())
        .addColumn('holder', 'text', (c) => c.notNull())
        .addColumn('acquired_at', 'text', (c) => c.notNull())
        .addColumn('expires_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createTable('autoscaler_functions').ifNotExists()
        .addColumn('version_id', 'text', (c) => c.primaryKey())
        .addColumn('nca_id', 'text', (c) => c.notNull())
        .addColumn('function_id', 'text', (c) => c.notNull())
        .addColumn('discovered_at', 'text', (c) => c.notNull())
        .addColumn('last_seen_at', 'text', (c) => c.notNull())
        .addColumn('last_invocation_at', 'text')
        .addColumn('desired', 'integer')
        .addColumn('instances', 'integer')
        .addColumn('utilization', 'real')
        .addColumn('reason', 'text')
        .addColumn('detail', 'text')
        .addColumn('decided_at', 'text')
        .addColumn('skipped_status', 'text')
        .execute();
      await db.schema.createTable('autoscaler_desired').ifNotExists()
        .addColumn('gpu_spec_id', 'text', (c) => c.primaryKey())
        .addColumn('version_id', 'text', (c) => c.notNull())
        .addColumn('desired', 'integer', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .addColumn('woken_at', 'text')
        .execute();
      await db.schema.createIndex('autoscaler_desired_by_version').ifNotExists().on('autoscaler_desired').columns(['version_id']).execute();
    },
  };
}
