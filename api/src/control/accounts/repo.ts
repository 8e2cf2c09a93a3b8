// Store access for accounts.
import type { Kysely, Selectable } from 'kysely';
import type { AccountsTable, Database } from '../../store/schema.ts';

export type AccountRow = Selectable<AccountsTable>;

export function createAccountsRepo(db: Kysely<Database>) {
  return {
    find(ncaId: string): Promise<AccountRow | undefined> {
      return db.selectFrom('accounts').selectAll().where('nca_id', '=', ncaId).executeTakeFirst();
    },
    list(): Promise<AccountRow[]> {
      return db.selectFrom('accounts').selectAll().orderBy('nca_id').execute();
    },
    async insert(row: AccountRow): Promise<void> {
      await db.insertInto('accounts').values(row).execute();
    },
    async update(ncaId: string, changes: Partial<AccountRow>): Promise<AccountRow | undefined> {
      await db.updateTable('accounts').set(changes).where('nca_id', '=', ncaId).execute();
      return this.find(ncaId);
    },
  };
}

export type AccountsRepo = ReturnType<typeof createAccountsRepo>;
