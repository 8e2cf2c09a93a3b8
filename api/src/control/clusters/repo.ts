// Store access for clusters. The list columns and the GPU offerings are decoded here, with the schema
// registration takes them with, so the rest of the platform sees arrays, never text.
import type { Kysely, Selectable } from 'kysely';
import { z } from 'zod';
import type { Logger } from '../../logger.ts';
import { decodeEach, decodeJson } from '../../store/json.ts';
import type { ClustersTable, Database } from '../../store/schema.ts';
import { gpuSchema, type Gpu } from './schema.ts';

type StoredCluster = Selectable<ClustersTable>;
type ListColumn = 'authorized_nca_ids' | 'capabilities' | 'attributes';

/** A cluster as stored, its lists and GPU offerings decoded. */
export type ClusterRow = Omit<StoredCluster, ListColumn | 'gpus'> & Record<ListColumn, string[]> & { gpus: Gpu[] };

const names = z.array(z.string());
const gpus = z.array(gpuSchema);

function decode(row: StoredCluster): ClusterRow {
  const where = (column: string) => ({ table: 'clusters', key: row.id, column });
  return {
    ...row,
    authorized_nca_ids: decodeJson(names, row.authorized_nca_ids, where('authorized_nca_ids')),
    capabilities: decodeJson(names, row.capabilities, where('capabilities')),
    attributes: decodeJson(names, row.attributes, where('attributes')),
    gpus: decodeJson(gpus, row.gpus, where('gpus')),
  };
}

/** The columns to write: lists as JSON text. */
function encode(changes: Partial<ClusterRow>): Partial<StoredCluster> {
  const { authorized_nca_ids: authorized, capabilities, attributes, gpus: offered, ...plain } = changes;
  return {
    ...plain,
    ...(authorized ? { authorized_nca_ids: JSON.stringify(authorized) } : {}),
    ...(capabilities ? { capabilities: JSON.stringify(capabilities) } : {}),
    ...(attributes ? { attributes: JSON.stringify(attributes) } : {}),
    ...(offered ? { gpus: JSON.stringify(offered) } : {}),
  };
}

export function createClustersRepo(db: Kysely<Database>, log: Logger) {
  const select = () => db.selectFrom('clusters').selectAll();
  return {
    async insert(row: ClusterRow): Promise<void> {
      await db.insertInto('clusters').values(encode(row) as StoredCluster).execute();
    },
    async find(ncaId: string, id: string): Promise<ClusterRow | undefined> {
      const row = await select().where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
      return row && decode(row);
    },
    async findById(id: string): Promise<ClusterRow | undefined> {
      const row = await select().where('id', '=', id).executeTakeFirst();
      return row && decode(row);
    },
    async findByCredentialHash(hash: string): Promise<ClusterRow | undefined> {
      const row = await select().where('agent_credential_hash', '=', hash).executeTakeFirst();
      return row && decode(row);
    },
    async listByAccount(ncaId: string): Promise<ClusterRow[]> {
      return decodeEach(await select().where('nca_id', '=', ncaId).orderBy('created_at').execute(), decode, log);
    },
    /** Every cluster; few per installation, so filtering by authorisation happens in the service. */
    async listAll(): Promise<ClusterRow[]> {
      return decodeEach(await select().orderBy('created_at').execute(), decode, log);
    },
    async update(id: string, changes: Partial<ClusterRow>): Promise<void> {
      await db.updateTable('clusters').set(encode(changes)).where('id', '=', id).execute();
    },
    async delete(ncaId: string, id: string): Promise<boolean> {
      const result = await db.deleteFrom('clusters').where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },
  };
}

export type ClustersRepo = ReturnType<typeof createClustersRepo>;
