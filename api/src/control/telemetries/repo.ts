// Store access for telemetries. The types are decoded with the schema they are answered with; the
// secret stays sealed until the exporter asks for it (service.ts targetsOf).
import type { Kysely, Selectable } from 'kysely';
import { decodeJson } from '../../store/json.ts';
import type { TelemetriesDatabase, TelemetriesTable } from './migration.ts';
import { telemetrySchema, type TelemetryType } from './schema.ts';

type StoredTelemetry = Selectable<TelemetriesTable>;

/** A telemetry as stored, its types decoded. */
export type TelemetryRow = Omit<StoredTelemetry, 'types'> & { types: TelemetryType[] };

function decode(row: StoredTelemetry): TelemetryRow {
  return { ...row, types: decodeJson(telemetrySchema.shape.types, row.types, { table: 'telemetries', key: row.telemetry_id, column: 'types' }) };
}

export function createTelemetriesRepo(db: Kysely<TelemetriesDatabase>) {
  const select = () => db.selectFrom('telemetries').selectAll();
  return {
    async insert(row: TelemetryRow): Promise<void> {
      await db.insertInto('telemetries').values({ ...row, types: JSON.stringify(row.types) }).execute();
    },
    async find(ncaId: string, telemetryId: string): Promise<TelemetryRow | undefined> {
      const row = await select().where('nca_id', '=', ncaId).where('telemetry_id', '=', telemetryId).executeTakeFirst();
      return row && decode(row);
    },
    async findMany(ncaId: string, telemetryIds: string[]): Promise<TelemetryRow[]> {
      if (telemetryIds.length === 0) return [];
      return (await select().where('nca_id', '=', ncaId).where('telemetry_id', 'in', telemetryIds).execute()).map(decode);
    },
    async list(ncaId: string): Promise<TelemetryRow[]> {
      return (await select().where('nca_id', '=', ncaId).orderBy('created_at').orderBy('telemetry_id').execute()).map(decode);
    },
    async count(ncaId: string): Promise<number> {
      const row = await db.selectFrom('telemetries').select((eb) => eb.fn.countAll<number>().as('n')).where('nca_id', '=', ncaId).executeTakeFirstOrThrow();
      return Number(row.n);
    },
    async delete(ncaId: string, telemetryId: string): Promise<boolean> {
      const result = await db.deleteFrom('telemetries').where('nca_id', '=', ncaId).where('telemetry_id', '=', telemetryId).executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },
  };
}

export type TelemetriesRepo = ReturnType<typeof createTelemetriesRepo>;
