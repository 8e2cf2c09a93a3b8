// Store access for invocations answered 202. Requests answered within their poll window never touch
// the store; from the 202 on, a request is durable until its result is collected.
import type { Kysely, Selectable } from 'kysely';
import type { Database, InvocationsTable } from '../store/schema.ts';

export type InvocationRow = Selectable<InvocationsTable>;

export function createInvocationsRepo(db: Kysely<Database>) {
  return {
    async insert(row: InvocationRow): Promise<void> {
      await db.insertInto('invocations').values(row).execute();
    },
    listAll(): Promise<InvocationRow[]> {
      return db.selectFrom('invocations').selectAll().orderBy('created_at').execute();
    },
    async update(requestId: string, changes: Partial<InvocationRow>): Promise<void> {
      await db.updateTable('invocations').set(changes).where('request_id', '=', requestId).execute();
    },
    async delete(requestId: string): Promise<void> {
      await db.deleteFrom('invocations').where('request_id', '=', requestId).execute();
    },
    async deleteOlderThan(at: string): Promise<void> {
      await db.deleteFrom('invocations').where('state', '=', 'done').where('updated_at', '<', at).execute();
    },
  };
}

export type InvocationsRepo = ReturnType<typeof createInvocationsRepo>;
