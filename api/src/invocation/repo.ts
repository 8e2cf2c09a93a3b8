// Store access for invocations answered 202. Requests answered within their poll window never touch
// the store; from the 202 on, a request is durable until its result is collected. The JSON columns are
// decoded with zod here, so the rest of the plane sees records, never text.
import type { Kysely, Selectable } from 'kysely';
import { z } from 'zod';
import type { Database, InvocationsTable } from '../store/schema.ts';
import { decodeJson } from '../store/json.ts';
import { targetSchema, type Target } from './resolver.ts';
import type { InvocationState, StoredResult } from './invocation.ts';

/** The request to replay when re-queued (column `request`). */
const storedRequest = z.object({
  headers: z.record(z.string(), z.string()),
  sse: z.boolean(),
  passThrough: z.object({ method: z.string(), path: z.string() }).optional(),
  assets: z.array(z.string()).optional(),
  subject: z.string(),
  target: targetSchema,
  /** The API replica holding it (several replicas on NATS): its death is noticed by the others. */
  replica: z.string().optional(),
  /** The node whose result keeper finishes it: its replica went away while sending it (compute/keeper.ts). */
  keeper: z.string().optional(),
});

/** A result's status and headers (column `result`; the body is `result_body`). */
const storedResult = z.object({
  status: z.number().int(),
  headers: z.record(z.string(), z.union([z.string(), z.array(z.string())])),
});

const storedState = z.enum(['queued', 'running', 'done']);

export type StoredRequest = z.infer<typeof storedRequest>;

export interface DurableRecord {
  requestId: string;
  state: InvocationState;
  request: StoredRequest;
  body: Buffer;
  result?: StoredResult;
}

type InvocationRow = Selectable<InvocationsTable>;

const column = (row: { request_id: string }, name: 'request' | 'result') => ({ table: 'invocations', key: row.request_id, column: name });
const requestOf = (row: { request_id: string; request: string }) => decodeJson(storedRequest, row.request, column(row, 'request'));

function decode(row: InvocationRow): DurableRecord {
  const record: DurableRecord = {
    requestId: row.request_id,
    state: storedState.parse(row.state),
    request: requestOf(row),
    body: Buffer.from(row.body),
  };
  if (row.state === 'done' && row.result) record.result = { ...decodeJson(storedResult, row.result, column(row, 'result')), body: Buffer.from(row.result_body ?? []) };
  return record;
}

export function createInvocationsRepo(db: Kysely<Database>) {
  const finishing = (requestId: string, result: StoredResult, at: string) => db.updateTable('invocations').set({
    state: 'done', result: JSON.stringify({ status: result.status, headers: result.headers }), result_body: result.body, updated_at: at,
  }).where('request_id', '=', requestId);
  return {
    async insert(record: DurableRecord, at: string): Promise<void> {
      const { target } = record.request;
      await db.insertInto('invocations').values({
        request_id: record.requestId, nca_id: target.ncaId, function_id: target.functionId, version_id: target.versionId,
        state: record.state, request: JSON.stringify(record.request), body: record.body, result: null, result_body: null,
        created_at: at, updated_at: at,
      }).execute();
    },
    /** Every record, oldest first; rows that do not decode are named in `unreadable`, not thrown. */
    async listAll(): Promise<{ records: DurableRecord[]; unreadable: string[] }> {
      const out = { records: [] as DurableRecord[], unreadable: [] as string[] };
      for (const row of await db.selectFrom('invocations').selectAll().orderBy('created_at').execute()) {
        try {
          out.records.push(decode(row));
        } catch {
          out.unreadable.push(row.request_id);
        }
      }
      return out;
    },
    async find(requestId: string): Promise<DurableRecord | undefined> {
      const row = await db.selectFrom('invocations').selectAll().where('request_id', '=', requestId).executeTakeFirst();
      return row && decode(row);
    },
    /** Records not finished that name a replica (several replicas share the store). */
    async listHeld(): Promise<DurableRecord[]> {
      return (await db.selectFrom('invocations').selectAll().where('state', '!=', 'done').where('request', 'like', '%"replica":%').execute()).map(decode);
    },
    /** Hands a queued record of replica `from` to `to`; false when another replica took it first. */
    async reassign(requestId: string, from: string, to: string): Promise<boolean> {
      const row = await db.selectFrom('invocations').select(['request_id', 'request']).where('request_id', '=', requestId).where('state', '=', 'queued').executeTakeFirst();
      const stored = row && requestOf(row);
      if (!row || stored?.replica !== from) return false;
      const request = JSON.stringify({ ...stored, replica: to });
      const result = await db.updateTable('invocations').set({ request })
        .where('request_id', '=', requestId).where('state', '=', 'queued').where('request', '=', row.request).executeTakeFirst();
      return result.numUpdatedRows === 1n;
    },
    /** A waiting request moved to another version of its function (its own stopped taking requests). */
    async retarget(requestId: string, target: Target, at: string): Promise<void> {
      const row = await db.selectFrom('invocations').select(['request_id', 'request']).where('request_id', '=', requestId).where('state', '=', 'queued').executeTakeFirst();
      if (!row) return;
      const request = JSON.stringify({ ...requestOf(row), target });
      await db.updateTable('invocations').set({ request, version_id: target.versionId, updated_at: at })
        .where('request_id', '=', requestId).where('state', '=', 'queued').execute();
    },
    /** A running record becomes node `nodeId`'s to finish; false when it is not running, or already another's. */
    async keep(requestId: string, nodeId: string): Promise<boolean> {
      const row = await db.selectFrom('invocations').select(['request_id', 'request']).where('request_id', '=', requestId).where('state', '=', 'running').executeTakeFirst();
      const stored = row && requestOf(row);
      if (!row || !stored) return false;
      if (stored.keeper !== undefined) return stored.keeper === nodeId;
      const result = await db.updateTable('invocations').set({ request: JSON.stringify({ ...stored, keeper: nodeId }) })
        .where('request_id', '=', requestId).where('state', '=', 'running').where('request', '=', row.request).executeTakeFirst();
      return result.numUpdatedRows === 1n;
    },
    /** Queued → running, only if still queued: true for the one caller that may run it (at most once). */
    async claim(requestId: string, at: string): Promise<boolean> {
      const result = await db.updateTable('invocations').set({ state: 'running', updated_at: at })
        .where('request_id', '=', requestId).where('state', '=', 'queued').executeTakeFirst();
      return result.numUpdatedRows === 1n;
    },
    /** Takes a finished result out: true for the one caller that returns it. */
    async collect(requestId: string): Promise<boolean> {
      const result = await db.deleteFrom('invocations').where('request_id', '=', requestId).where('state', '=', 'done').executeTakeFirst();
      return result.numDeletedRows === 1n;
    },
    async storeResult(requestId: string, result: StoredResult, at: string): Promise<void> {
      await finishing(requestId, result, at).execute();
    },
    /**
     * The result of a running record, only while it runs and is still node `keeper`'s to finish (undefined:
     * still no node's): true if stored.
     */
    async storeRunning(requestId: string, keeper: string | undefined, result: StoredResult, at: string): Promise<boolean> {
      const row = await db.selectFrom('invocations').select(['request_id', 'request']).where('request_id', '=', requestId).where('state', '=', 'running').executeTakeFirst();
      if (!row || requestOf(row).keeper !== keeper) return false;
      // Unchanged since read: a node's mark made meanwhile wins.
      const stored = await finishing(requestId, result, at).where('state', '=', 'running').where('request', '=', row.request).executeTakeFirst();
      return stored.numUpdatedRows === 1n;
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
