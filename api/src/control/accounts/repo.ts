// Store access for accounts. The admin client ids are decoded here, with the schema accounts are answered with.
import type { Kysely, Selectable } from 'kysely';
import { decodeJson } from '../../store/json.ts';
import type { AccountsTable, Database } from '../../store/schema.ts';
import { accountSchema } from './schema.ts';

type StoredAccount = Selectable<AccountsTable>;

/** An account as stored, its admin client ids decoded and its bigint a number. */
export type AccountRow = Omit<StoredAccount, 'admin_client_ids' | 'max_asset_bytes'> & { admin_client_ids: string[]; max_asset_bytes: number };

function decode(row: StoredAccount): AccountRow {
  const where = { table: 'accounts', key: row.nca_id, column: 'admin_client_ids' };
  return {
    ...row, admin_client_ids: decodeJson(accountSchema.shape.adminClientIds, row.admin_client_ids, where), max_asset_bytes: Number(row.max_asset_bytes),
  };
}

export function createAccountsRepo(db: Kysely<Database>) {
  const select = () => db.selectFrom('accounts').selectAll();
  return {
    async find(ncaId: string): Promise<AccountRow | undefined> {
      const row = await select().where('nca_id', '=', ncaId).executeTakeFirst();
      return row && decode(row);
    },
    async list(): Promise<AccountRow[]> {
      return (await select().orderBy('nca_id').execute()).map(decode);
    },
    /** Every account's instance limit: what placement reads each round, nothing decoded. */
    instanceLimits(): Promise<Pick<AccountRow, 'nca_id' | 'max_instances'>[]> {
      return db.selectFrom('accounts').select(['nca_id', 'max_instances']).execute();
    },
    async insert(row: AccountRow): Promise<void> {
      await db.insertInto('accounts').values({ ...row, admin_client_ids: JSON.stringify(row.admin_client_ids) }).execute();
    },
    /** Changes the limits (the only columns that change after creation). */
    async update(ncaId: string, changes: Partial<Omit<AccountRow, 'admin_client_ids'>>): Promise<AccountRow | undefined> {
      await db.updateTable('accounts').set(changes).where('nca_id', '=', ncaId).execute();
      return this.find(ncaId);
    },
  };
}

export type AccountsRepo = ReturnType<typeof createAccountsRepo>;
