// Store access for instances: what the control plane wants running where, and what agents last said.
// An instance's endpoint is written for operators and for a replica taking placement over (which adopts
// the rows its predecessor wrote moments before); a restarted process reads none back: stale until the
// agent reports again. Writes go through `writes`: with an elected placement, fenced by its term.
import type { Kysely, Selectable } from 'kysely';
import { endpointSchema, type Endpoint } from '../../compute/protocol.ts';
import type { Database, InstancesTable } from '../../store/schema.ts';
import { unfenced, type PlacementWrites } from '../placement/fence.ts';

/** An instance as placement holds it: the endpoint is its agent's last report, or none yet. */
export type InstanceRow = Omit<Selectable<InstancesTable>, 'endpoint'> & { endpoint: Endpoint | null };

function encode(changes: Partial<InstanceRow>): Partial<Selectable<InstancesTable>> {
  const { endpoint, ...plain } = changes;
  return endpoint === undefined ? plain : { ...plain, endpoint: endpoint && JSON.stringify(endpoint) };
}

function endpointOf(stored: string | null): Endpoint | null {
  if (!stored) return null;
  try {
    const parsed = endpointSchema.safeParse(JSON.parse(stored));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

export function createInstancesRepo(db: Kysely<Database>, writes: PlacementWrites = unfenced(db)) {
  const rows = () => db.selectFrom('instances').selectAll().orderBy('created_at').execute();
  return {
    async insert(row: InstanceRow): Promise<void> {
      await writes.run((fenced) => fenced.insertInto('instances').values(encode(row) as Selectable<InstancesTable>).execute());
    },
    /** Every instance, oldest first, without the endpoints its agents last reported. */
    async listAll(): Promise<InstanceRow[]> {
      return (await rows()).map((row) => ({ ...row, endpoint: null }));
    },
    /** Every instance, oldest first, as stored: endpoints too. */
    async listStored(): Promise<InstanceRow[]> {
      return (await rows()).map((row) => ({ ...row, endpoint: endpointOf(row.endpoint) }));
    },
    async update(instanceId: string, changes: Partial<InstanceRow>): Promise<void> {
      await writes.run((fenced) => fenced.updateTable('instances').set(encode(changes)).where('instance_id', '=', instanceId).execute());
    },
    async delete(instanceId: string): Promise<void> {
      await writes.run((fenced) => fenced.deleteFrom('instances').where('instance_id', '=', instanceId).execute());
    },
  };
}

export type InstancesRepo = ReturnType<typeof createInstancesRepo>;
