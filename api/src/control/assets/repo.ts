// Store access for assets. Only uploaded assets exist for the API; pending ones wait for their upload.
import type { Kysely, Selectable } from 'kysely';
import type { AssetsDatabase, AssetsTable } from './migration.ts';

export type AssetRow = Selectable<AssetsTable>;

export function createAssetsRepo(db: Kysely<AssetsDatabase>) {
  return {
    async insert(row: AssetRow): Promise<void> {
      await db.insertInto('assets').values(row).execute();
    },
    find(assetId: string): Promise<AssetRow | undefined> {
      return db.selectFrom('assets').selectAll().where('asset_id', '=', assetId).executeTakeFirst();
    },
    /** The account's uploaded assets with these ids. */
    findUploaded(ncaId: string, assetIds: string[]): Promise<AssetRow[]> {
      return db.selectFrom('assets').selectAll().where('nca_id', '=', ncaId).where('asset_id', 'in', assetIds)
        .where('uploaded_at', 'is not', null).execute();
    },
    listUploaded(ncaId: string): Promise<AssetRow[]> {
      return db.selectFrom('assets').selectAll().where('nca_id', '=', ncaId).where('uploaded_at', 'is not', null)
        .orderBy('created_at').orderBy('asset_id').execute();
    },
    async markUploaded(assetId: string, size: number, at: string): Promise<void> {
      await db.updateTable('assets').set({ size, uploaded_at: at }).where('asset_id', '=', assetId).execute();
    },
    /** Back to waiting for its bytes (an upload that was not kept). */
    async markPending(assetId: string): Promise<void> {
      await db.updateTable('assets').set({ size: null, uploaded_at: null }).where('asset_id', '=', assetId).execute();
    },
    /** The account's assets, uploaded or waiting for their bytes. */
    async count(ncaId: string): Promise<number> {
      const row = await db.selectFrom('assets').select((eb) => eb.fn.countAll().as('count')).where('nca_id', '=', ncaId).executeTakeFirstOrThrow();
      return Number(row.count);
    },
    /** The bytes of the account's uploaded assets together. */
    async storedBytes(ncaId: string): Promise<number> {
      const row = await db.selectFrom('assets').select((eb) => eb.fn.sum<number | string | null>('size').as('bytes')).where('nca_id', '=', ncaId)
        .executeTakeFirstOrThrow();
      return Number(row.bytes ?? 0);
    },
    async delete(assetId: string): Promise<void> {
      await db.deleteFrom('assets').where('asset_id', '=', assetId).execute();
    },
    /** Pending assets created before `at` (their upload URL has expired). */
    listPendingBefore(at: string): Promise<AssetRow[]> {
      return db.selectFrom('assets').selectAll().where('uploaded_at', 'is', null).where('created_at', '<', at).execute();
    },
  };
}

export type AssetsRepo = ReturnType<typeof createAssetsRepo>;
