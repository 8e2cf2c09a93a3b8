// Store access for nodes: the agents of a cluster, one row per node name (agents sharing a cluster
// credential each register their own). The lease columns mirror what the placement process holds
// (control/instances/leases.ts) so that any replica can say whether a cluster has a live link.
import { randomUUID } from 'node:crypto';
import type { Kysely, Selectable } from 'kysely';
import { z } from 'zod';
import { gpuOfferSchema, type GpuOffer } from '../../compute/protocol.ts';
import type { Logger } from '../../logger.ts';
import { decodeEach, decodeJson } from '../../store/json.ts';
import type { Database, NodesTable } from '../../store/schema.ts';

/** A node as stored, its GPUs decoded. */
export type NodeRow = Omit<Selectable<NodesTable>, 'gpus'> & { gpus: GpuOffer[] };

const gpus = z.array(gpuOfferSchema);

function decode(row: Selectable<NodesTable>): NodeRow {
  return { ...row, gpus: decodeJson(gpus, row.gpus, { table: 'nodes', key: row.id, column: 'gpus' }) };
}

/** Whether the node has a link whose lease still runs at `at`. */
export function isLive(node: NodeRow, at: Date): boolean {
  return node.linked === 1 && node.lease_expires_at !== null && Date.parse(node.lease_expires_at) > at.getTime();
}

/** Nodes one cluster may register: its credential's holder cannot fill the store with names. */
export const MAX_NODES_PER_CLUSTER = 1000;

export function createNodesRepo(db: Kysely<Database>, log: Logger) {
  const select = () => db.selectFrom('nodes').selectAll();
  return {
    /**
     * The node of this name in the cluster, registered now when it is new (generation 0, not yet linked);
     * undefined when the cluster already has MAX_NODES_PER_CLUSTER others.
     */
    async register(clusterId: string, name: string, at: string): Promise<NodeRow | undefined> {
      const found = await select().where('cluster_id', '=', clusterId).where('name', '=', name).executeTakeFirst();
      if (found) return decode(found);
      const { count } = await db.selectFrom('nodes').select((eb) => eb.fn.countAll<number>().as('count')).where('cluster_id', '=', clusterId).executeTakeFirstOrThrow();
      if (Number(count) >= MAX_NODES_PER_CLUSTER) return undefined;
      const row = {
        id: randomUUID(), cluster_id: clusterId, name, gpus: '[]', agent_version: '', generation: 0, linked: 0,
        lease_expires_at: null, created_at: at, updated_at: at,
      };
      // Two agents of one name racing: the second insert loses and reads the first's row.
      await db.insertInto('nodes').values(row).onConflict((conflict) => conflict.columns(['cluster_id', 'name']).doNothing()).execute();
      return decode(await select().where('cluster_id', '=', clusterId).where('name', '=', name).executeTakeFirstOrThrow());
    },
    async listAll(): Promise<NodeRow[]> {
      return decodeEach(await select().orderBy('created_at').execute(), decode, log);
    },
    async find(id: string): Promise<NodeRow | undefined> {
      const row = await select().where('id', '=', id).executeTakeFirst();
      return row && decode(row);
    },
    async listByCluster(clusterId: string): Promise<NodeRow[]> {
      return decodeEach(await select().where('cluster_id', '=', clusterId).orderBy('name').execute(), decode, log);
    },
    async update(id: string, changes: Partial<NodeRow>): Promise<void> {
      const { gpus: offered, ...plain } = changes;
      await db.updateTable('nodes').set({ ...plain, ...(offered ? { gpus: JSON.stringify(offered) } : {}) }).where('id', '=', id).execute();
    },
    async deleteByCluster(clusterId: string): Promise<void> {
      await db.deleteFrom('nodes').where('cluster_id', '=', clusterId).execute();
    },
  };
}

export type NodesRepo = ReturnType<typeof createNodesRepo>;
