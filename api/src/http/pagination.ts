// Opaque page cursors: the position after the last row of a page, base64url JSON. A cursor the server
// did not make is a 400 naming the parameter, never a crash.
import { invalid } from './problem.ts';

export function encodeCursor(position: Record<string, string | number>): string {
  return Buffer.from(JSON.stringify(position)).toString('base64url');
}

export function decodeCursor<T extends Record<string, string | number>>(cursor: string, keys: (keyof T)[]): T {
  try {
    const value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as T;
    if (value && typeof value === 'object' && keys.every((key) => ['string', 'number'].includes(typeof value[key]))) return value;
  } catch {
    // fall through to the 400
  }
  throw invalid([{ field: 'query cursor', message: 'not a cursor this server issued' }]);
}
