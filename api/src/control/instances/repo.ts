// Store access for instances: what the control plane wants running where, and what agents last said.
// An instance's endpoint is written for operators but never read back: after a restart it is stale
// until its agent reports again, so placement starts from none.
import type { Kysely, Selectable } from 'kysely';
import type { Endpoint } from '../../compute/protocol.ts';
import type { Database, InstancesTable } from '../../store/schema.ts';

/** An instance as placement holds it: the endpoint is its agent's last report, or none yet. */
export type InstanceRow = Omit<Selectable<InstancesTable>, 'endpoint'> & { endpoint: Endpoint | null };

function encode(changes: Partial<InstanceRow>): Partial<Selectable<InstancesTable>> {
  const { endpoint, ...plain } = changes;
  return endpoint === undefined ? plain : { ...plain, endpoint: endpoint && JSON.stringify(endpoint) };
}

export function createInstancesRepo(db: Kysely<Database>) {
  return {
    async insert(row: InstanceRow): Promise<void> {
      await db.insertInto('instances').values(encode(row) as Selectable<InstancesTable>).execute();
    },
    /** Every instance, oldest first, without the endpoints its agents last reported. */
    async listAll(): Promise<InstanceRow[]> {
      const rows = await db.selectFrom('instances').selectAll().orderBy('created_at').execute();
      return rows.map((row) => ({ ...row, endpoint: null }));
    },
    async update(instanceId: string, changes: Partial<InstanceRow>): Promise<void> {
      await db.updateTable('instances').set(encode(changes)).where('instance_id', '=', instanceId).execute();
    },
    async delete(instanceId: string): Promise<void> {
      await db.deleteFrom('instances').where('instance_id', '=', instanceId).execute();
    },
  };
}

export type InstancesRepo = ReturnType<typeof createInstancesRepo>;
