// Paths that whoever holds them may use until they expire, without a credential: the platform's
// pre-signed URLs (asset uploads and downloads, large results), as the reference's object-store URLs are.
// The signature is an HMAC-SHA256 of the method, the path and the expiry under the installation's URL key,
// so a path cannot be reused for another object, another method, or past its time.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { forbidden } from './problem.ts';

/** The query a signed path carries; declared by the routes that serve them. */
export const signedQuery = z.object({
  expires: z.coerce.number().int('must be a whole number of seconds since the epoch'),
  signature: z.string().regex(/^[A-Za-z0-9_-]{43}$/, 'must be the signature the platform gave'),
});

export type SignedQuery = z.infer<typeof signedQuery>;

export interface PathSigner {
  /** `path` with the expiry and signature that let anyone `method` it for `seconds`. */
  sign(method: 'GET' | 'PUT', path: string, seconds: number): string;
  /** A 403 Problem unless `query` signs `method path` and has not expired. */
  check(method: 'GET' | 'PUT', path: string, query: SignedQuery): void;
}

export function createPathSigner(key: string, now: () => number = Date.now): PathSigner {
  const mac = (method: string, path: string, expires: number) =>
    createHmac('sha256', key).update(`${method}\n${path}\n${expires}`).digest();

  return {
    sign(method, path, seconds) {
      const expires = Math.floor(now() / 1000) + seconds;
      return `${path}?expires=${expires}&signature=${mac(method, path, expires).toString('base64url')}`;
    },
    check(method, path, query) {
      const given = Buffer.from(query.signature, 'base64url');
      const expected = mac(method, path, query.expires);
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        throw forbidden('The URL is not one the platform signed for this request');
      }
      if (query.expires * 1000 < now()) throw forbidden('The URL has expired; ask for a new one');
    },
  };
}
