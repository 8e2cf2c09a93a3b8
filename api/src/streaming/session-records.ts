// Streaming sessions that have started, kept in the store so that a broker taking over (the next holder of
// placement, or this replica after a restart) can carry them on: their browsers come back within the
// resume window and find their container, which kept the session. The migration api/src/database.ts
// registers as '0015_streaming_sessions', and its repo. A row is written when a session's browser first
// connects and deleted when the session ends; a broker that stops leaves its rows to the next.
import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';
import { z } from 'zod';
import type { Logger } from '../logger.ts';
import { decodeEach, decodeJson } from '../store/json.ts';
import { sessionSubjectSchema } from './sessions.ts';
import { versionSchema } from './versions.ts';

/** What a broker needs to carry a started session on. */
export const sessionRecordSchema = z.object({
  id: z.string(),
  ncaId: z.string(),
  subject: sessionSubjectSchema,
  functionId: z.string(),
  version: versionSchema,
  instanceId: z.string(),
  /** Epoch ms. */
  joinedAt: z.number(),
  grantedAt: z.number(),
  connectedAt: z.number(),
});

export type SessionRecord = z.infer<typeof sessionRecordSchema>;

export interface StreamingSessionsTable {
  session_id: string;
  /** A SessionRecord as JSON. */
  record: string;
}

// A type alias, not an interface: Kysely's withTables<T>() needs its index signature.
export type StreamingSessionsDatabase = { streaming_sessions: StreamingSessionsTable };

export function streamingSessionsMigration(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.createTable('streaming_sessions').ifNotExists()
        .addColumn('session_id', 'text', (c) => c.primaryKey())
        .addColumn('record', 'text', (c) => c.notNull())
        .execute();
    },
  };
}

export function createSessionRecords(db: Kysely<StreamingSessionsDatabase>, log: Logger) {
  return {
    async save(record: SessionRecord): Promise<void> {
      const row = { session_id: record.id, record: JSON.stringify(record) };
      await db.insertInto('streaming_sessions').values(row)
        .onConflict((conflict) => conflict.column('session_id').doUpdateSet({ record: row.record })).execute();
    },
    /** Every stored record (a row that does not decode is left out, and logged). */
    async list(): Promise<SessionRecord[]> {
      const rows = await db.selectFrom('streaming_sessions').selectAll().execute();
      return decodeEach(rows, (row) => decodeJson(sessionRecordSchema, row.record, { table: 'streaming_sessions', key: row.session_id, column: 'record' }), log);
    },
    async delete(sessionId: string): Promise<void> {
      await db.deleteFrom('streaming_sessions').where('session_id', '=', sessionId).execute();
    },
  };
}

export type SessionRecords = ReturnType<typeof createSessionRecords>;
