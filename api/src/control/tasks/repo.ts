// Store access for tasks, their events and their results. A status change and its event are written in
// one transaction, and only from the statuses it may come from, so a cancel racing an agent's report
// leaves exactly one of them in force. A task keeps its document as text, so a list page splices rows;
// documentOf decodes one, secretsOf opens the sealed secrets, and a result's metadata is decoded on read.
import { randomUUID } from 'node:crypto';
import type { Kysely, Selectable, Transaction } from 'kysely';
import { z } from 'zod';
import type { SecretBox } from '../../store/encryption.ts';
import { decodeJson } from '../../store/json.ts';
import { secretSchema } from '../functions/schema.ts';
import type { TaskEventsTable, TaskResultsTable, TasksDatabase, TasksTable } from './migration.ts';
import { taskDocumentSchema, taskResultSchema, type TaskDocument, type TaskSecret, type TaskStatus } from './schema.ts';

export type TaskRow = Selectable<TasksTable>;
export type TaskEventRow = Selectable<TaskEventsTable>;
/** A result as stored, its metadata decoded. */
export type TaskResultRow = Omit<Selectable<TaskResultsTable>, 'metadata'> & { metadata: Record<string, unknown> };

const where = (row: { id: string }, column: string) => ({ table: 'tasks', key: row.id, column });

export function documentOf(row: TaskRow): TaskDocument {
  return decodeJson(taskDocumentSchema, row.document, where(row, 'document'));
}

const gpuOnly = taskDocumentSchema.pick({ gpuSpecification: true });

/** Only the GPU of a task's document: what a list page needs of it beside the text. */
export function gpuSpecificationOf(row: TaskRow): TaskDocument['gpuSpecification'] {
  return decodeJson(gpuOnly, row.document, where(row, 'document')).gpuSpecification;
}

const secretsSchema = z.array(secretSchema);

/** A task's secrets in the clear (sealed at rest, store/encryption.ts). */
export function secretsOf(box: SecretBox, row: Pick<TaskRow, 'id' | 'secrets'>): TaskSecret[] {
  return row.secrets ? decodeJson(secretsSchema, box.decrypt(row.secrets), where(row, 'secrets')) : [];
}

function decodeResult(row: Selectable<TaskResultsTable>): TaskResultRow {
  return { ...row, metadata: decodeJson(taskResultSchema.shape.metadata, row.metadata, { table: 'task_results', key: row.result_id, column: 'metadata' }) };
}

export interface PagePosition {
  createdAt: string;
  id: string;
}

export function createTasksRepo(db: Kysely<TasksDatabase>) {
  async function addEvents(trx: Kysely<TasksDatabase> | Transaction<TasksDatabase>, row: { id: string; nca_id: string }, messages: string[], at: string) {
    if (messages.length === 0) return;
    await trx.insertInto('task_events')
      .values(messages.map((message) => ({ event_id: randomUUID(), task_id: row.id, nca_id: row.nca_id, message, created_at: at })))
      .execute();
  }

  return {
    /** A new task and its first event. */
    async insert(row: TaskRow, message: string): Promise<void> {
      await db.transaction().execute(async (trx) => {
        await trx.insertInto('tasks').values(row).execute();
        await addEvents(trx, row, [message], row.created_at);
      });
    },

    find(ncaId: string, id: string): Promise<TaskRow | undefined> {
      return db.selectFrom('tasks').selectAll().where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
    },
    findById(id: string): Promise<TaskRow | undefined> {
      return db.selectFrom('tasks').selectAll().where('id', '=', id).executeTakeFirst();
    },

    /** One page of an account's tasks, newest first, optionally of one status; an index range scan. */
    list(ncaId: string, limit: number, status?: TaskStatus, after?: PagePosition): Promise<TaskRow[]> {
      let query = db.selectFrom('tasks').selectAll().where('nca_id', '=', ncaId);
      if (status) query = query.where('status', '=', status);
      if (after) {
        query = query.where((eb) => eb.or([
          eb('created_at', '<', after.createdAt),
          eb.and([eb('created_at', '=', after.createdAt), eb('id', '<', after.id)]),
        ]));
      }
      return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
    },

    async basics(ncaId: string, ids: string[]): Promise<{ id: string; name: string; status: string }[]> {
      return db.selectFrom('tasks').select(['id', 'name', 'status']).where('nca_id', '=', ncaId).where('id', 'in', ids)
        .orderBy('created_at').execute();
    },

    async countInFlight(ncaId: string): Promise<number> {
      const row = await db.selectFrom('tasks').select((eb) => eb.fn.countAll<number>().as('n'))
        .where('nca_id', '=', ncaId).where('status', 'in', ['QUEUED', 'LAUNCHED', 'RUNNING']).executeTakeFirstOrThrow();
      return Number(row.n);
    },

    /** Queued tasks of every account, oldest first. */
    listQueued(limit: number): Promise<TaskRow[]> {
      return db.selectFrom('tasks').selectAll().where('status', '=', 'QUEUED').orderBy('created_at').orderBy('id').limit(limit).execute();
    },
    listDispatched(): Promise<TaskRow[]> {
      return db.selectFrom('tasks').selectAll().where('status', 'in', ['LAUNCHED', 'RUNNING']).execute();
    },

    /**
     * Moves a task to `status` (with other column changes) if it is still in one of `from`, and records
     * `events` with it. False when it had already moved on (nothing written).
     */
    async transition(id: string, from: readonly string[], changes: Partial<TaskRow> & { status: string; updated_at: string }, events: string[]): Promise<TaskRow | undefined> {
      return db.transaction().execute(async (trx) => {
        const result = await trx.updateTable('tasks').set(changes).where('id', '=', id).where('status', 'in', [...from]).executeTakeFirst();
        if (Number(result.numUpdatedRows) === 0) return undefined;
        const row = await trx.selectFrom('tasks').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
        await addEvents(trx, row, events, changes.updated_at);
        return row;
      });
    },

    /** Changes that are not a status change (progress, instance state, secrets). */
    async update(id: string, changes: Partial<TaskRow>): Promise<void> {
      await db.updateTable('tasks').set(changes).where('id', '=', id).execute();
    },

    async addEvents(row: { id: string; nca_id: string }, messages: string[], at: string): Promise<void> {
      await addEvents(db, row, messages, at);
    },

    /** The task and everything recorded about it. */
    async delete(id: string): Promise<void> {
      await db.transaction().execute(async (trx) => {
        await trx.deleteFrom('task_events').where('task_id', '=', id).execute();
        await trx.deleteFrom('task_results').where('task_id', '=', id).execute();
        await trx.deleteFrom('tasks').where('id', '=', id).execute();
      });
    },

    events(taskId: string, limit: number, afterSeq?: number): Promise<TaskEventRow[]> {
      let query = db.selectFrom('task_events').selectAll().where('task_id', '=', taskId);
      if (afterSeq !== undefined) query = query.where('seq', '>', afterSeq);
      return query.orderBy('seq').limit(limit).execute();
    },

    async results(taskId: string, limit: number, after?: { createdAt: string; id: string }): Promise<TaskResultRow[]> {
      let query = db.selectFrom('task_results').selectAll().where('task_id', '=', taskId);
      if (after) {
        query = query.where((eb) => eb.or([
          eb('created_at', '>', after.createdAt),
          eb.and([eb('created_at', '=', after.createdAt), eb('result_id', '>', after.id)]),
        ]));
      }
      return (await query.orderBy('created_at').orderBy('result_id').limit(limit).execute()).map(decodeResult);
    },

    async findResult(taskId: string, resultId: string): Promise<TaskResultRow | undefined> {
      const row = await db.selectFrom('task_results').selectAll().where('task_id', '=', taskId).where('result_id', '=', resultId).executeTakeFirst();
      return row && decodeResult(row);
    },

    /** Stores a result's row, replacing one of the same name (a retried upload). */
    async putResult(row: TaskResultRow): Promise<void> {
      await db.transaction().execute(async (trx) => {
        await trx.deleteFrom('task_results').where('task_id', '=', row.task_id).where('name', '=', row.name).execute();
        await trx.insertInto('task_results').values({ ...row, metadata: JSON.stringify(row.metadata) }).execute();
      });
    },
  };
}

export type TasksRepo = ReturnType<typeof createTasksRepo>;
