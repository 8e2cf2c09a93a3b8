// Store access for the owners' numbers (migration.ts): rows written once per interval and replica, read
// back by version and time range, deleted after the retention.
import type { Kysely } from 'kysely';
import type { Logger } from '../../logger.ts';
import { decodeEach, decodeJson } from '../../store/json.ts';
import { histogramSchema, type Histogram } from './histogram.ts';
import type { FunctionStatsTable, StatsDatabase } from './migration.ts';

export type StatsRow = Omit<FunctionStatsTable, 'latency'> & { latency: Histogram };

export function createStatsRepo(db: Kysely<StatsDatabase>, log: Logger) {
  return {
    async insert(rows: StatsRow[]): Promise<void> {
      if (rows.length === 0) return;
      await db.insertInto('function_stats').values(rows.map((row) => ({ ...row, latency: JSON.stringify(row.latency) }))).execute();
    },

    /** Rows of `versionIds` whose interval starts in [from, to), oldest first. A row that does not decode is left out (logged). */
    async range(versionIds: string[], from: string, to: string): Promise<StatsRow[]> {
      if (versionIds.length === 0) return [];
      const rows = await db.selectFrom('function_stats').selectAll()
        .where('version_id', 'in', versionIds).where('at', '>=', from).where('at', '<', to).orderBy('at').execute();
      return decodeEach(rows, (row) => ({
        ...row, latency: decodeJson(histogramSchema, row.latency, { table: 'function_stats', key: `${row.version_id} ${row.at} ${row.replica}`, column: 'latency' }),
      }), log);
    },

    async deleteBefore(cutoff: string): Promise<void> {
      await db.deleteFrom('function_stats').where('at', '<', cutoff).execute();
    },
  };
}

export type StatsRepo = ReturnType<typeof createStatsRepo>;
