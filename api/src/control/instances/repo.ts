// Store access for instances: what the control plane wants running where, and what agents last said.
import type { Kysely, Selectable } from 'kysely';
import type { Database, InstancesTable } from '../../store/schema.ts';

export type InstanceRow = Selectable<InstancesTable>;

export function createInstancesRepo(db: Kysely<Database>) {
  return {
    async insert(row: InstanceRow): Promise<void> {
      await db.insertInto('instances').values(row).execute();
    },
    listAll(): Promise<InstanceRow[]> {
      return db.selectFrom('instances').selectAll().orderBy('created_at').execute();
    },
    byVersions(versionIds: string[]): Promise<InstanceRow[]> {
      if (versionIds.length === 0) return Promise.resolve([]);
      return db.selectFrom('instances').selectAll().where('version_id', 'in', versionIds).where('desired', '=', 1)
        .orderBy('created_at').execute();
    },
    async update(instanceId: string, changes: Partial<InstanceRow>): Promise<void> {
      await db.updateTable('instances').set(changes).where('instance_id', '=', instanceId).execute();
    },
    async delete(instanceId: string): Promise<void> {
      await db.deleteFrom('instances').where('instance_id', '=', instanceId).execute();
    },
  };
}

export type InstancesRepo = ReturnType<typeof createInstancesRepo>;
