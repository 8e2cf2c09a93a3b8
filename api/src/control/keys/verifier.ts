// The one verifier for every bearer: opaque API keys (SVC_API_KEY, SVC_TASK_API_KEY), management JWTs
// (SVC_TOKEN), account-administration JWTs and the bootstrap secret. A verified credential is trusted
// for `recheckMs` (≤ 1 s), then its row is read again, so a revocation reaches every replica within 1 s
// while the hot path costs one hash and one map lookup.
import { decodeJwt, errors as joseErrors } from 'jose';
import type { CredentialKind, CredentialVerifier, Principal } from '../../domain/principal.ts';
import { unauthorized } from '../../domain/problem.ts';
import { BOOTSTRAP_PREFIX, hashSecret, isWellFormedApiKey, API_KEY_PREFIX } from './key-format.ts';
import type { CredentialRow, KeysRepo } from './repo.ts';
import { ADMIN_ISSUER, TOKEN_ISSUER, verifyJwt, type JwtKey } from './signing.ts';

export interface VerifierOptions {
  repo: KeysRepo;
  tokenKey: JwtKey;
  adminKey: JwtKey;
  /** The installation's bootstrap secret: whether a presented one still works (control/installation). */
  bootstrap: { check(secret: string): Promise<boolean> };
  serviceId: string;
  recheckMs: number;
  now?: () => number;
}

interface Cached {
  principal: Principal;
  checkedAt: number;
  expiresAt: number;
}

const MAX_CACHED = 10_000;

export function createCredentialVerifier(options: VerifierOptions): CredentialVerifier {
  const now = options.now ?? Date.now;
  const cache = new Map<string, Cached>();

  async function check(bearer: string): Promise<{ principal: Principal; expiresAt: number }> {
    if (bearer.startsWith(API_KEY_PREFIX)) {
      if (!isWellFormedApiKey(bearer)) throw unauthorized('Invalid API key');
      return fromRow(await options.repo.findBySecretHash(hashSecret(bearer)), ['api-key', 'task-key']);
    }
    if (bearer.startsWith(BOOTSTRAP_PREFIX)) {
      if (!(await options.bootstrap.check(bearer))) throw unauthorized('Invalid bootstrap secret, or one already used or expired (docs/security.md)');
      // Never cached: once used it must be refused at once.
      return {
        principal: { credentialId: 'bootstrap', kind: 'bootstrap', ncaId: '*', ownerId: 'installation', scopes: new Set() },
        expiresAt: 0,
      };
    }
    return checkJwt(bearer);
  }

  async function checkJwt(bearer: string) {
    let issuer: unknown;
    try {
      issuer = decodeJwt(bearer).iss;
    } catch {
      throw unauthorized('Unrecognised credential');
    }
    const admin = issuer === ADMIN_ISSUER;
    let payload;
    try {
      payload = await verifyJwt(admin ? options.adminKey : options.tokenKey, bearer, admin ? ADMIN_ISSUER : TOKEN_ISSUER,
        options.serviceId, new Date(now()));
    } catch (error) {
      if (error instanceof joseErrors.JWTExpired) throw unauthorized('Token has expired');
      throw unauthorized('Invalid token');
    }
    if (admin) {
      return {
        principal: { credentialId: `admin:${payload.jti ?? payload.sub}`, kind: 'admin' as const, ncaId: '*', ownerId: payload.sub!, scopes: new Set(['account_setup']) },
        expiresAt: payload.exp! * 1000,
      };
    }
    if (typeof payload.jti !== 'string') throw unauthorized('Invalid token');
    return fromRow(await options.repo.findById(payload.jti), ['token']);
  }

  function fromRow(row: CredentialRow | undefined, kinds: CredentialKind[]) {
    if (!row || !kinds.includes(row.kind as CredentialKind)) throw unauthorized('Unknown credential');
    if (row.revoked_at) throw unauthorized('Credential has been revoked');
    const expiresAt = Date.parse(row.expires_at);
    if (expiresAt <= now()) throw unauthorized('Credential has expired');
    const principal: Principal = {
      credentialId: row.id,
      kind: row.kind as CredentialKind,
      ncaId: row.nca_id,
      ownerId: row.owner_id,
      scopes: new Set(row.scopes),
    };
    return { principal, expiresAt };
  }

  return {
    async verify(bearer) {
      const at = now();
      const cached = cache.get(bearer);
      if (cached && at - cached.checkedAt < options.recheckMs && at < cached.expiresAt) return cached.principal;
      cache.delete(bearer);
      const { principal, expiresAt } = await check(bearer);
      if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value!);
      cache.set(bearer, { principal, checkedAt: at, expiresAt });
      return principal;
    },
  };
}
