// Store access for the autoscaler: the discovery lock, the active set with its last decisions, and the
// desired instance count per GPU specification that placement reads.
import { sql, type Kysely, type Selectable } from 'kysely';
import type { AutoscalerDatabase, AutoscalerDesiredTable, AutoscalerFunctionsTable } from './migration.ts';

export type FunctionStateRow = Selectable<AutoscalerFunctionsTable>;
export type DesiredRow = Selectable<AutoscalerDesiredTable>;

export interface Seen {
  versionId: string;
  ncaId: string;
  functionId: string;
}

/** Rows per statement in batch writes: well under SQLite's bound-parameter limit. */
const BATCH = 200;

function chunks<T>(items: T[]): T[][] {
  const out: T[][] = [];
  for (let start = 0; start < items.length; start += BATCH) out.push(items.slice(start, start + BATCH));
  return out;
}

export function createAutoscalerRepo(db: Kysely<AutoscalerDatabase>) {
  return {
    /**
     * Takes the lock `name` for `holder` until `expiresAt`, or renews it, in one atomic statement: the
     * row is written only when it is free, expired or already ours. True when `holder` holds it now.
     */
    async tryLock(name: string, holder: string, at: string, expiresAt: string): Promise<boolean> {
      const row = await db.insertInto('autoscaler_locks')
        .values({ name, holder, acquired_at: at, expires_at: expiresAt })
        .onConflict((conflict) => conflict.column('name').doUpdateSet({
          holder,
          expires_at: expiresAt,
          acquired_at: sql<string>`case when autoscaler_locks.holder = ${holder} then autoscaler_locks.acquired_at else ${at} end`,
        }).where((eb) => eb.or([eb('autoscaler_locks.expires_at', '<=', at), eb('autoscaler_locks.holder', '=', holder)])))
        .returning('holder')
        .executeTakeFirst();
      return row?.holder === holder;
    },

    /** Gives the lock up at once (a clean shutdown), so another replica need not wait for it to expire. */
    async unlock(name: string, holder: string): Promise<void> {
      await db.deleteFrom('autoscaler_locks').where('name', '=', name).where('holder', '=', holder).execute();
    },

    lock(name: string) {
      return db.selectFrom('autoscaler_locks').selectAll().where('name', '=', name).executeTakeFirst();
    },

    /**
     * Discovery: adds new versions to the active set and refreshes the ones seen again, but only those last
     * marked before `refreshBefore`, so a steady active set costs a read, not a write per version.
     */
    async markSeen(seen: Seen[], at: string, refreshBefore: string): Promise<void> {
      const known = new Map((await db.selectFrom('autoscaler_functions').select(['version_id', 'last_seen_at']).execute())
        .map((row) => [row.version_id, row.last_seen_at]));
      const fresh = seen.filter((version) => !known.has(version.versionId));
      const stale = seen.filter((version) => (known.get(version.versionId) ?? at) < refreshBefore).map((version) => version.versionId);
      for (const batch of chunks(fresh)) {
        await db.insertInto('autoscaler_functions')
          .values(batch.map((version) => ({
            version_id: version.versionId, nca_id: version.ncaId, function_id: version.functionId, discovered_at: at, last_seen_at: at,
            last_invocation_at: null, desired: null, instances: null, utilization: null, reason: null, detail: null, decided_at: null, skipped_status: null,
          })))
          .onConflict((conflict) => conflict.column('version_id').doUpdateSet({ last_seen_at: at }))
          .execute();
      }
      for (const batch of chunks(stale)) {
        await db.updateTable('autoscaler_functions').set({ last_seen_at: at }).where('version_id', 'in', batch).execute();
      }
    },

    /** Versions discovery has not seen since `before` leave the active set. */
    async forgetUnseen(before: string): Promise<number> {
      const gone = await db.deleteFrom('autoscaler_functions').where('last_seen_at', '<', before).executeTakeFirst();
      return Number(gone.numDeletedRows);
    },

    functions(): Promise<FunctionStateRow[]> {
      return db.selectFrom('autoscaler_functions').selectAll().execute();
    },

    /**
     * The round's writes in batches of one statement each: decisions whose outcome changed, and idle clocks
     * that moved (only ever forward). Rows are given whole, so a row forgotten meanwhile comes back intact.
     */
    async saveRound(rows: FunctionStateRow[]): Promise<void> {
      for (const batch of chunks(rows)) {
        await db.insertInto('autoscaler_functions').values(batch)
          .onConflict((conflict) => conflict.column('version_id').doUpdateSet((eb) => ({
            desired: eb.ref('excluded.desired'), instances: eb.ref('excluded.instances'), utilization: eb.ref('excluded.utilization'),
            reason: eb.ref('excluded.reason'), detail: eb.ref('excluded.detail'), decided_at: eb.ref('excluded.decided_at'),
            skipped_status: eb.ref('excluded.skipped_status'),
            last_invocation_at: sql<string | null>`case when autoscaler_functions.last_invocation_at is null or autoscaler_functions.last_invocation_at < excluded.last_invocation_at then excluded.last_invocation_at else autoscaler_functions.last_invocation_at end`,
          })))
          .execute();
      }
    },

    async markSkipped(versionId: string, status: string, detail: string, at: string): Promise<void> {
      await db.updateTable('autoscaler_functions')
        .set({ skipped_status: status, reason: 'skipped', detail, decided_at: at })
        .where('version_id', '=', versionId).execute();
    },

    desired(): Promise<DesiredRow[]> {
      return db.selectFrom('autoscaler_desired').selectAll().execute();
    },

    /**
     * Writes desired counts per GPU specification in one transaction. A specification woken by placement
     * after `decidedFrom` (the moment the round read its inputs) keeps its count: the round did not know.
     */
    async setDesired(entries: { gpuSpecId: string; versionId: string; desired: number }[], at: string, decidedFrom: string): Promise<void> {
      if (entries.length === 0) return;
      await db.transaction().execute(async (trx) => {
        for (const batch of chunks(entries)) {
          await trx.insertInto('autoscaler_desired')
            .values(batch.map((entry) => ({ gpu_spec_id: entry.gpuSpecId, version_id: entry.versionId, desired: entry.desired, updated_at: at, woken_at: null })))
            .onConflict((conflict) => conflict.column('gpu_spec_id').doUpdateSet((eb) => ({
              desired: eb.ref('excluded.desired'), version_id: eb.ref('excluded.version_id'), updated_at: eb.ref('excluded.updated_at'),
            })).where((eb) => eb.or([eb('autoscaler_desired.woken_at', 'is', null), eb('autoscaler_desired.woken_at', '<', decidedFrom)])))
            .execute();
        }
      });
    },

    /** Placement raising a version from zero for a waiting request: at least one instance, and a fresh idle clock. */
    async wake(version: Seen, gpuSpecId: string, at: string): Promise<void> {
      await db.transaction().execute(async (trx) => {
        await trx.insertInto('autoscaler_desired')
          .values({ gpu_spec_id: gpuSpecId, version_id: version.versionId, desired: 1, updated_at: at, woken_at: at })
          .onConflict((conflict) => conflict.column('gpu_spec_id').doUpdateSet({
            desired: sql<number>`case when autoscaler_desired.desired < 1 then 1 else autoscaler_desired.desired end`, updated_at: at, woken_at: at,
          }))
          .execute();
        await trx.insertInto('autoscaler_functions')
          .values({
            version_id: version.versionId, nca_id: version.ncaId, function_id: version.functionId, discovered_at: at, last_seen_at: at,
            last_invocation_at: at, desired: null, instances: null, utilization: null, reason: null, detail: null, decided_at: null, skipped_status: null,
          })
          .onConflict((conflict) => conflict.column('version_id').doUpdateSet({ last_invocation_at: at, last_seen_at: at }))
          .execute();
      });
    },

    /** Desired counts of versions no longer deployed: placement has nothing to apply them to. */
    async forgetDesired(versionIds: string[]): Promise<void> {
      for (const batch of chunks(versionIds)) {
        await db.deleteFrom('autoscaler_desired').where('version_id', 'in', batch).execute();
      }
    },
  };
}

export type AutoscalerRepo = ReturnType<typeof createAutoscalerRepo>;
