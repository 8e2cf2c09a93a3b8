// Store access for credentials. Knows rows, not HTTP or key formats. The list columns are decoded here,
// with the schemas the key service answers them with.
import type { Kysely, Selectable } from 'kysely';
import { z } from 'zod';
import { decodeJson } from '../../store/json.ts';
import type { CredentialsTable, Database } from '../../store/schema.ts';
import { authorizationsSchema, keySchema } from './schema.ts';

type StoredCredential = Selectable<CredentialsTable>;

/** A credential as stored, its audiences, authorizations and scopes decoded. */
export type CredentialRow = Omit<StoredCredential, 'audience_service_ids' | 'authorizations' | 'scopes'> & {
  audience_service_ids: string[];
  authorizations: z.infer<typeof authorizationsSchema>;
  scopes: string[];
};

const scopesSchema = z.array(z.string());

function decode(row: StoredCredential): CredentialRow {
  const where = (column: string) => ({ table: 'credentials', key: row.id, column });
  return {
    ...row,
    audience_service_ids: decodeJson(keySchema.shape.audience_service_ids, row.audience_service_ids, where('audience_service_ids')),
    authorizations: decodeJson(authorizationsSchema, row.authorizations, where('authorizations')),
    scopes: decodeJson(scopesSchema, row.scopes, where('scopes')),
  };
}

export function createKeysRepo(db: Kysely<Database>) {
  const select = () => db.selectFrom('credentials').selectAll();
  return {
    async insert(row: CredentialRow): Promise<void> {
      await db.insertInto('credentials').values({
        ...row, audience_service_ids: JSON.stringify(row.audience_service_ids),
        authorizations: JSON.stringify(row.authorizations), scopes: JSON.stringify(row.scopes),
      }).execute();
    },
    async findById(id: string): Promise<CredentialRow | undefined> {
      const row = await select().where('id', '=', id).executeTakeFirst();
      return row && decode(row);
    },
    async findBySecretHash(hash: string): Promise<CredentialRow | undefined> {
      const row = await select().where('secret_hash', '=', hash).executeTakeFirst();
      return row && decode(row);
    },
    /** One page of an account's credentials, newest first, after the (created_at, id) cursor. */
    async listByAccount(ncaId: string, limit: number, after?: { createdAt: string; id: string }): Promise<CredentialRow[]> {
      let query = select().where('nca_id', '=', ncaId);
      if (after) {
        query = query.where((eb) => eb.or([
          eb('created_at', '<', after.createdAt),
          eb.and([eb('created_at', '=', after.createdAt), eb('id', '<', after.id)]),
        ]));
      }
      return (await query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).execute()).map(decode);
    },
    async revoke(ncaId: string, id: string, at: string): Promise<boolean> {
      const result = await db.updateTable('credentials').set({ revoked_at: at })
        .where('id', '=', id).where('nca_id', '=', ncaId).where('revoked_at', 'is', null).executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },
  };
}

export type KeysRepo = ReturnType<typeof createKeysRepo>;
