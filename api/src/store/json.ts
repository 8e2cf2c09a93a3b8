// JSON columns, decoded by the repos with the zod schema of their contract, so services see values of
// the right shape or a clear error, never a cast. A row that does not decode is named (table, key,
// column); a list read by a loop leaves it out with a log line, so one bad row cannot stop the loop.
import { z } from 'zod';
import type { Logger } from '../logger.ts';

/** Where a stored value lives, for the error that names it. */
export interface Column {
  table: string;
  key: string;
  column: string;
}

export class UnreadableColumn extends Error {
  constructor(where: Column, reason: string) {
    super(`${where.table} ${where.key}: column ${where.column} does not decode (${reason})`);
    this.name = 'UnreadableColumn';
  }
}

export function decodeJson<S extends z.ZodType>(schema: S, text: string, where: Column): z.output<S> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new UnreadableColumn(where, `not JSON: ${(error as Error).message}`);
  }
  const result = schema.safeParse(value);
  if (!result.success) throw new UnreadableColumn(where, z.prettifyError(result.error).replaceAll('\n', ' '));
  return result.data;
}

/** Each row decoded; those that do not decode are left out and logged. */
export function decodeEach<R, T>(rows: R[], decode: (row: R) => T, log: Logger): T[] {
  const out: T[] = [];
  for (const row of rows) {
    try {
      out.push(decode(row));
    } catch (error) {
      if (!(error instanceof UnreadableColumn)) throw error;
      log.error({ err: error }, 'stored row skipped: it does not decode');
    }
  }
  return out;
}
