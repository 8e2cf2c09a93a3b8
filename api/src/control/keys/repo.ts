// Store access for credentials. Knows rows, not HTTP or key formats.
import type { Kysely, Selectable } from 'kysely';
import type { CredentialsTable, Database } from '../../store/schema.ts';

export type CredentialRow = Selectable<CredentialsTable>;

export function createKeysRepo(db: Kysely<Database>) {
  return {
    async insert(row: CredentialRow): Promise<void> {
      await db.insertInto('credentials').values(row).execute();
    },
    findById(id: string): Promise<CredentialRow | undefined> {
      return db.selectFrom('credentials').selectAll().where('id', '=', id).executeTakeFirst();
    },
    findBySecretHash(hash: string): Promise<CredentialRow | undefined> {
      return db.selectFrom('credentials').selectAll().where('secret_hash', '=', hash).executeTakeFirst();
    },
    /** One page of an account's credentials, newest first, after the (created_at, id) cursor. */
    listByAccount(ncaId: string, limit: number, after?: { createdAt: string; id: string }): Promise<CredentialRow[]> {
      let query = db.selectFrom('credentials').selectAll().where('nca_id', '=', ncaId);
      if (after) {
        query = query.where((eb) => eb.or([
          eb('created_at', '<', after.createdAt),
          eb.and([eb('created_at', '=', after.createdAt), eb('id', '<', after.id)]),
        ]));
      }
      return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
    },
    async revoke(ncaId: string, id: string, at: string): Promise<boolean> {
      const result = await db.updateTable('credentials').set({ revoked_at: at })
        .where('id', '=', id).where('nca_id', '=', ncaId).where('revoked_at', 'is', null).executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },
  };
}

export type KeysRepo = ReturnType<typeof createKeysRepo>;
