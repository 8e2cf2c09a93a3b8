// Store access for registry credentials.
import type { Kysely, Selectable } from 'kysely';
import type { Database, RegistryCredentialsTable } from '../../store/schema.ts';

export type RegistryCredentialRow = Selectable<RegistryCredentialsTable>;

export function createRegistryRepo(db: Kysely<Database>) {
  return {
    async insert(row: RegistryCredentialRow): Promise<void> {
      await db.insertInto('registry_credentials').values(row).execute();
    },
    find(ncaId: string, id: string): Promise<RegistryCredentialRow | undefined> {
      return db.selectFrom('registry_credentials').selectAll().where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
    },
    list(ncaId: string): Promise<RegistryCredentialRow[]> {
      return db.selectFrom('registry_credentials').selectAll().where('nca_id', '=', ncaId).orderBy('created_at').execute();
    },
    async count(ncaId: string): Promise<number> {
      const row = await db.selectFrom('registry_credentials').select((eb) => eb.fn.countAll<number>().as('n'))
        .where('nca_id', '=', ncaId).executeTakeFirstOrThrow();
      return Number(row.n);
    },
    async update(id: string, changes: Partial<RegistryCredentialRow>): Promise<void> {
      await db.updateTable('registry_credentials').set(changes).where('id', '=', id).execute();
    },
    async delete(ncaId: string, id: string): Promise<boolean> {
      const result = await db.deleteFrom('registry_credentials').where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },
  };
}

export type RegistryRepo = ReturnType<typeof createRegistryRepo>;
