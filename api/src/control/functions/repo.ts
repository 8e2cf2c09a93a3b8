// Store access for functions and their versions. A version keeps its document as text, so a list page
// splices rows without parsing them; documentOf decodes one when its fields are needed, and
// secretsOf opens the sealed secrets, each with the schema of its contract.
import type { Kysely, Selectable, Transaction } from 'kysely';
import { z } from 'zod';
import type { SecretBox } from '../../store/encryption.ts';
import { decodeJson } from '../../store/json.ts';
import type { Database, FunctionsTable, FunctionVersionsTable } from '../../store/schema.ts';
import { functionDocumentSchema, secretSchema, type FunctionDocument, type Secret } from './schema.ts';

export type FunctionRow = Selectable<FunctionsTable>;
export type VersionRow = Selectable<FunctionVersionsTable>;

export function documentOf(row: VersionRow): FunctionDocument {
  return decodeJson(functionDocumentSchema, row.document, { table: 'function_versions', key: row.version_id, column: 'document' });
}

const secretsSchema = z.array(secretSchema);

/** A version's secrets in the clear (sealed at rest, store/encryption.ts). */
export function secretsOf(box: SecretBox, row: Pick<VersionRow, 'version_id' | 'secrets'>): Secret[] {
  if (!row.secrets) return [];
  return decodeJson(secretsSchema, box.decrypt(row.secrets), { table: 'function_versions', key: row.version_id, column: 'secrets' });
}

/** Where a page of versions ends: creation time, ties broken by version id (the page cursor's content). */
export const pagePositionSchema = z.object({ createdAt: z.string(), versionId: z.string() });
export type PagePosition = z.infer<typeof pagePositionSchema>;

export function createFunctionsRepo(db: Kysely<Database>) {
  return {
    /** A new function and its first version, both or neither. */
    async insertFunction(fn: FunctionRow, version: VersionRow): Promise<void> {
      await db.transaction().execute(async (trx: Transaction<Database>) => {
        await trx.insertInto('functions').values(fn).execute();
        await trx.insertInto('function_versions').values(version).execute();
      });
    },
    async insertVersion(version: VersionRow): Promise<void> {
      await db.insertInto('function_versions').values(version).execute();
    },
    findFunction(ncaId: string, id: string): Promise<FunctionRow | undefined> {
      return db.selectFrom('functions').selectAll().where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
    },
    findVersion(ncaId: string, functionId: string, versionId: string): Promise<VersionRow | undefined> {
      return db.selectFrom('function_versions').selectAll()
        .where('nca_id', '=', ncaId).where('function_id', '=', functionId).where('version_id', '=', versionId).executeTakeFirst();
    },
    findVersionById(versionId: string): Promise<VersionRow | undefined> {
      return db.selectFrom('function_versions').selectAll().where('version_id', '=', versionId).executeTakeFirst();
    },
    /** What placement and the autoscaler read of many versions at once: their status and kind. */
    statuses(versionIds: string[]): Promise<Pick<VersionRow, 'version_id' | 'name' | 'function_type' | 'status'>[]> {
      if (versionIds.length === 0) return Promise.resolve([]);
      return db.selectFrom('function_versions').select(['version_id', 'name', 'function_type', 'status']).where('version_id', 'in', versionIds).execute();
    },
    listVersionsOf(ncaId: string, functionId: string): Promise<VersionRow[]> {
      return db.selectFrom('function_versions').selectAll()
        .where('nca_id', '=', ncaId).where('function_id', '=', functionId)
        .orderBy('created_at', 'desc').orderBy('version_id', 'desc').execute();
    },
    /** One page of an account's versions, newest first, after `after`; an index range scan. */
    listVersions(ncaId: string, limit: number, after?: PagePosition): Promise<VersionRow[]> {
      let query = db.selectFrom('function_versions').selectAll().where('nca_id', '=', ncaId);
      if (after) {
        query = query.where((eb) => eb.or([
          eb('created_at', '<', after.createdAt),
          eb.and([eb('created_at', '=', after.createdAt), eb('version_id', '<', after.versionId)]),
        ]));
      }
      return query.orderBy('created_at', 'desc').orderBy('version_id', 'desc').limit(limit).execute();
    },
    async listFunctionIds(ncaId: string): Promise<string[]> {
      const rows = await db.selectFrom('functions').select('id').where('nca_id', '=', ncaId).orderBy('created_at').execute();
      return rows.map((row) => row.id);
    },
    async countFunctions(ncaId: string): Promise<number> {
      const row = await db.selectFrom('functions').select((eb) => eb.fn.countAll<number>().as('n')).where('nca_id', '=', ncaId).executeTakeFirstOrThrow();
      return Number(row.n);
    },
    async updateVersion(versionId: string, changes: Partial<VersionRow>): Promise<void> {
      await db.updateTable('function_versions').set(changes).where('version_id', '=', versionId).execute();
    },
    /** Deletes a version, and its function when it was the last one. */
    async deleteVersion(functionId: string, versionId: string): Promise<void> {
      await db.transaction().execute(async (trx: Transaction<Database>) => {
        await trx.deleteFrom('function_versions').where('version_id', '=', versionId).execute();
        const left = await trx.selectFrom('function_versions').select('version_id').where('function_id', '=', functionId).limit(1).executeTakeFirst();
        if (!left) await trx.deleteFrom('functions').where('id', '=', functionId).execute();
      });
    },
  };
}

export type FunctionsRepo = ReturnType<typeof createFunctionsRepo>;
