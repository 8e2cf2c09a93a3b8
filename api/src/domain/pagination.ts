// Opaque page cursors: the position after the last row of a page, base64url JSON, decoded with the
// schema of the list's position. A cursor the server did not make is a 400 naming the parameter, never a crash.
import { z } from 'zod';
import { invalid } from './problem.ts';

/** The position in a list ordered by creation time, ties broken by id (keys, tasks, task results). */
export const createdAtPosition = z.object({ createdAt: z.string(), id: z.string() });

export function encodeCursor(position: Record<string, string | number>): string {
  return Buffer.from(JSON.stringify(position)).toString('base64url');
}

export function decodeCursor<S extends z.ZodType<Record<string, string | number>>>(cursor: string, position: S): z.output<S> {
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    // not JSON: the 400 below
  }
  const decoded = position.safeParse(value);
  if (decoded.success) return decoded.data;
  throw invalid([{ field: 'query cursor', message: 'not a cursor this server issued' }]);
}
