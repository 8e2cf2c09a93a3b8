// The key service (spec 4.5): mints management tokens (SVC_TOKEN, a JWT) for `svc init`, issues opaque
// API keys (SVC_API_KEY, SVC_TASK_API_KEY), lists and revokes them. Only hashes are stored.
import { randomUUID } from 'node:crypto';
import type { Principal } from '../../domain/principal.ts';
import { invalid, notFound, unauthorized } from '../../domain/problem.ts';
import { createdAtPosition, decodeCursor, encodeCursor } from '../../domain/pagination.ts';
import { managementTokenScopes } from '../../domain/scopes.ts';
import type { AccountsService } from '../accounts/service.ts';
import { hashSecret, isWellFormedApiKey, newApiKey } from './key-format.ts';
import type { CredentialRow, KeysRepo } from './repo.ts';
import type { ApiKey, CreateKey, Introspect, Introspection, KeyIssuerHeaders, MintToken } from './schema.ts';
import { signJwt, TOKEN_ISSUER, type JwtKey } from './signing.ts';

export interface KeyServiceOptions {
  repo: KeysRepo;
  accounts: AccountsService;
  tokenKey: JwtKey;
  serviceId: string;
  defaultAccountId: string;
  tokenLifetimeSeconds: number;
  /** Spends the bootstrap secret when it mints a token (control/installation): true for one caller only. */
  spendBootstrap: () => Promise<boolean>;
  now?: () => Date;
}

const typeNames = { token: 'SVC_TOKEN', 'api-key': 'SVC_API_KEY', 'task-key': 'SVC_TASK_API_KEY' } as const;

/** Task keys are the ones issued for the tasks product (the reference CLI's nv-cloud-tasks, renamed). */
function isTaskKey(headers: KeyIssuerHeaders, body: CreateKey): boolean {
  return headers['key-issuer-service'] === 'svct-api'
    || body.authorizations.policies.some((policy) => /-cloud-tasks$/.test(policy.product ?? ''));
}

export function toApiKey(row: CredentialRow, now: Date, value?: string): ApiKey {
  const status = row.revoked_at ? 'REVOKED' : Date.parse(row.expires_at) <= now.getTime() ? 'EXPIRED' : 'ACTIVE';
  return {
    id: row.id,
    ...(value ? { value } : {}),
    status,
    type: typeNames[row.kind as keyof typeof typeNames],
    nca_id: row.nca_id,
    owner_type: row.owner_type,
    owner_id: row.owner_id,
    issuer_service: row.issuer_service,
    issuer_service_id: row.issuer_id,
    audience_service_ids: row.audience_service_ids,
    description: row.description,
    authorizations: row.authorizations,
    created_at: row.created_at,
    expires_at: row.expires_at,
    ...(row.revoked_at ? { revoked_at: row.revoked_at } : {}),
  };
}

export function createKeyService(options: KeyServiceOptions) {
  const now = options.now ?? (() => new Date());
  const { repo } = options;

  function assertFuture(expiresAt: Date) {
    if (expiresAt.getTime() <= now().getTime()) {
      throw invalid([{ field: 'expires_at', message: 'must be in the future' }]);
    }
  }

  return {
    /**
     * POST /v1/admin/keys: a management JWT with the default admin issuer scopes (spec 5.2), for the bootstrap
     * secret (which it spends) or an account-administration token.
     */
    async mintManagementToken(principal: Principal, input: MintToken): Promise<ApiKey> {
      const ncaId = input.ncaId ?? options.defaultAccountId;
      await options.accounts.requireAccount(ncaId);
      const issuedAt = now();
      const expiresAt = input.expires_at ? new Date(input.expires_at) : new Date(issuedAt.getTime() + options.tokenLifetimeSeconds * 1000);
      assertFuture(expiresAt);
      if (principal.kind === 'bootstrap' && !(await options.spendBootstrap())) {
        throw unauthorized('The bootstrap secret has just been used; it works once (docs/security.md)');
      }
      const scopes = input.scopes ?? [...managementTokenScopes];
      const authorizations = {
        policies: [{
          aud: options.serviceId, auds: [options.serviceId], product: 'svc-cloud-functions',
          resources: [{ id: '*', type: 'account-functions' }, { id: '*', type: 'authorized-functions' }], scopes,
        }],
      };
      const row: CredentialRow = {
        id: randomUUID(), nca_id: ncaId, kind: 'token', secret_hash: null,
        owner_type: 'SYSTEM', owner_id: 'svc-admin', issuer_service: 'svc-api', issuer_id: options.serviceId,
        description: input.description ?? 'Management token', audience_service_ids: [options.serviceId], authorizations, scopes,
        created_at: issuedAt.toISOString(), expires_at: expiresAt.toISOString(), revoked_at: null,
      };
      await repo.insert(row);
      const value = await signJwt(options.tokenKey, {
        iss: TOKEN_ISSUER, aud: options.serviceId, sub: row.owner_id, jti: row.id, ncaId, scopes,
      }, expiresAt);
      return toApiKey(row, issuedAt, value);
    },

    /** POST /v1/keys: an opaque key for the caller's account; its value is shown once. */
    async issueApiKey(principal: Principal, headers: KeyIssuerHeaders, input: CreateKey): Promise<ApiKey> {
      const issuedAt = now();
      const expiresAt = new Date(input.expires_at);
      assertFuture(expiresAt);
      const scopes = [...new Set(input.authorizations.policies.flatMap((policy) => policy.scopes))];
      const value = newApiKey();
      const row: CredentialRow = {
        id: randomUUID(), nca_id: principal.ncaId, kind: isTaskKey(headers, input) ? 'task-key' : 'api-key',
        secret_hash: hashSecret(value), owner_type: 'USER', owner_id: headers['key-owner-id'],
        issuer_service: headers['key-issuer-service'], issuer_id: headers['key-issuer-id'],
        description: input.description ?? '', audience_service_ids: input.audience_service_ids ?? [],
        authorizations: input.authorizations, scopes,
        created_at: issuedAt.toISOString(), expires_at: expiresAt.toISOString(), revoked_at: null,
      };
      await repo.insert(row);
      return toApiKey(row, issuedAt, value);
    },

    async list(principal: Principal, limit: number, cursor?: string): Promise<{ keys: ApiKey[]; cursor?: string }> {
      const after = cursor ? decodeCursor(cursor, createdAtPosition) : undefined;
      const rows = await repo.listByAccount(principal.ncaId, limit + 1, after);
      const page = rows.slice(0, limit);
      const last = page[page.length - 1];
      return {
        keys: page.map((row) => toApiKey(row, now())),
        ...(rows.length > limit ? { cursor: encodeCursor({ createdAt: last.created_at, id: last.id }) } : {}),
      };
    },

    async get(principal: Principal, id: string): Promise<ApiKey> {
      const row = await repo.findById(id);
      if (!row || row.nca_id !== principal.ncaId) throw notFound(`Key '${id}' does not exist`);
      return toApiKey(row, now());
    },

    /**
     * POST /v1/introspect: what an active API key of the caller's account may do. A key that is unknown,
     * revoked, expired, of another account or not meant for the audience named is one answer, 404, so the
     * endpoint tells nothing about keys the caller does not own.
     */
    async introspect(principal: Principal, input: Introspect): Promise<Introspection> {
      const row = isWellFormedApiKey(input.key) ? await repo.findBySecretHash(hashSecret(input.key)) : undefined;
      const key = row && row.nca_id === principal.ncaId ? toApiKey(row, now()) : undefined;
      const audiences = key?.audience_service_ids ?? [];
      const forAudience = !input.audience_service_id || audiences.length === 0 || audiences.includes(input.audience_service_id);
      if (!key || key.status !== 'ACTIVE' || !forAudience) throw notFound('The key is not an active API key of this account for that audience');
      return { owner_type: key.owner_type, owner_id: key.owner_id, key_id: key.id, issuer_service_id: key.issuer_service_id, authorizations: key.authorizations };
    },

    /** Revocation takes effect on every replica within the verifier's recheck interval (< 1 s). */
    async revoke(principal: Principal, id: string): Promise<void> {
      const row = await repo.findById(id);
      if (!row || row.nca_id !== principal.ncaId) throw notFound(`Key '${id}' does not exist`);
      await repo.revoke(principal.ncaId, id, now().toISOString());
    },
  };
}

export type KeyService = ReturnType<typeof createKeyService>;
