// Store access for clusters.
import type { Kysely, Selectable } from 'kysely';
import type { ClustersTable, Database } from '../../store/schema.ts';

export type ClusterRow = Selectable<ClustersTable>;

export function createClustersRepo(db: Kysely<Database>) {
  return {
    async insert(row: ClusterRow): Promise<void> {
      await db.insertInto('clusters').values(row).execute();
    },
    find(ncaId: string, id: string): Promise<ClusterRow | undefined> {
      return db.selectFrom('clusters').selectAll().where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
    },
    findById(id: string): Promise<ClusterRow | undefined> {
      return db.selectFrom('clusters').selectAll().where('id', '=', id).executeTakeFirst();
    },
    findByCredentialHash(hash: string): Promise<ClusterRow | undefined> {
      return db.selectFrom('clusters').selectAll().where('agent_credential_hash', '=', hash).executeTakeFirst();
    },
    listByAccount(ncaId: string): Promise<ClusterRow[]> {
      return db.selectFrom('clusters').selectAll().where('nca_id', '=', ncaId).orderBy('created_at').execute();
    },
    /** Every cluster; few per installation, so filtering by authorisation happens in the service. */
    listAll(): Promise<ClusterRow[]> {
      return db.selectFrom('clusters').selectAll().orderBy('created_at').execute();
    },
    async update(id: string, changes: Partial<ClusterRow>): Promise<void> {
      await db.updateTable('clusters').set(changes).where('id', '=', id).execute();
    },
    async delete(ncaId: string, id: string): Promise<boolean> {
      const result = await db.deleteFrom('clusters').where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },
  };
}

export type ClustersRepo = ReturnType<typeof createClustersRepo>;
