// The owners' numbers: the migration api/src/database.ts registers as '0012_function_stats', and its row
// type (the stats repo reaches it with db.withTables<StatsDatabase>()). Each API replica writes one row per
// function version it saw activity of, per interval; the API adds up the rows of every replica.
import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

export interface FunctionStatsTable {
  version_id: string;
  /** ISO 8601 UTC start of the interval (a multiple of its length since the epoch), and its length. */
  at: string;
  seconds: number;
  /** The process that wrote it: replicas never write the same row. */
  replica: string;
  nca_id: string;
  function_id: string;
  /** Invocations answered in the interval, by status class; rate_limited is part of client_errors. */
  requests: number;
  client_errors: number;
  rate_limited: number;
  server_errors: number;
  /** Latency until answered, in ms: JSON {bucket index: count} (histogram.ts), and the sum. */
  latency: string;
  latency_sum_ms: number;
  /** Requests waiting for a slot, sampled every second: the largest sample and the mean. */
  queue_max: number;
  queue_mean: number;
  /** Requests an instance worked on (sessions, for STREAMING functions), likewise. */
  inflight_max: number;
  inflight_mean: number;
}

// A type alias, not an interface: Kysely's withTables<T>() needs its index signature.
export type StatsDatabase = { function_stats: FunctionStatsTable };

export function statsMigration(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.createTable('function_stats').ifNotExists()
        .addColumn('version_id', 'text', (c) => c.notNull())
        .addColumn('at', 'text', (c) => c.notNull())
        .addColumn('seconds', 'integer', (c) => c.notNull())
        .addColumn('replica', 'text', (c) => c.notNull())
        .addColumn('nca_id', 'text', (c) => c.notNull())
        .addColumn('function_id', 'text', (c) => c.notNull())
        .addColumn('requests', 'integer', (c) => c.notNull())
        .addColumn('client_errors', 'integer', (c) => c.notNull())
        .addColumn('rate_limited', 'integer', (c) => c.notNull())
        .addColumn('server_errors', 'integer', (c) => c.notNull())
        .addColumn('latency', 'text', (c) => c.notNull())
        .addColumn('latency_sum_ms', 'double precision', (c) => c.notNull())
        .addColumn('queue_max', 'integer', (c) => c.notNull())
        .addColumn('queue_mean', 'double precision', (c) => c.notNull())
        .addColumn('inflight_max', 'integer', (c) => c.notNull())
        .addColumn('inflight_mean', 'double precision', (c) => c.notNull())
        .addPrimaryKeyConstraint('function_stats_pk', ['version_id', 'at', 'replica'])
        .execute();
      // Retention deletes by time across versions.
      await db.schema.createIndex('function_stats_by_time').ifNotExists().on('function_stats').columns(['at']).execute();
    },
  };
}
