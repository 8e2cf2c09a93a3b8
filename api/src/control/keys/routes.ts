// Routes of the key service host (api-keys.<gateway_address>).
import { z } from 'zod';
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import { createKeySchema, introspectionSchema, introspectSchema, keyIssuerHeaders, keyListResponse, keyParams, keySchema, listKeysQuery, mintTokenSchema, whoamiSchema } from './schema.ts';
import type { KeyService } from './service.ts';
import type { JwtKey } from './signing.ts';

const tag = 'API keys';

/** GET /v2/svc/whoami (api host): the presented credential as the platform sees it; no store access. */
export function whoamiRoute() {
  return route({
    method: 'GET', path: '/v2/svc/whoami', summary: 'Describe the presented credential', tag,
    access: { anyOf: [], credentials: ['token', 'api-key', 'task-key', 'admin'] },
    responses: { 200: { description: 'The credential', schema: whoamiSchema } },
    handle: async ({ principal }) => ({
      body: { credentialId: principal.credentialId, kind: principal.kind, ncaId: principal.ncaId, ownerId: principal.ownerId, scopes: [...principal.scopes] },
    }),
  });
}

export function keyRoutes(keys: KeyService, tokenKey: JwtKey) {
  return [
    route({
      method: 'POST', path: '/v1/admin/keys', summary: 'Mint a management token (SVC_TOKEN); used by `svc init`', tag,
      access: access.installationAdmin, body: mintTokenSchema,
      responses: { 200: { description: 'The token; its value is shown only here', schema: keySchema } },
      handle: async ({ principal, body }) => ({ body: await keys.mintManagementToken(principal, body) }),
    }),
    route({
      method: 'POST', path: '/v1/keys', summary: 'Create an API key', tag, access: access.keyManagement,
      headers: keyIssuerHeaders, body: createKeySchema,
      responses: { 200: { description: 'The key; its value is shown only here', schema: keySchema } },
      handle: async ({ principal, headers, body }) => ({ body: await keys.issueApiKey(principal, headers, body) }),
    }),
    route({
      method: 'GET', path: '/v1/keys', summary: "List the account's keys", tag, access: access.keyManagement,
      query: listKeysQuery,
      responses: { 200: { description: 'One page of keys, newest first', schema: keyListResponse } },
      handle: async ({ principal, query }) => ({ body: await keys.list(principal, query.limit, query.cursor) }),
    }),
    route({
      method: 'GET', path: '/v1/keys/{keyId}', summary: 'Get a key (never its value)', tag, access: access.keyManagement,
      params: keyParams,
      responses: { 200: { description: 'The key', schema: keySchema } },
      handle: async ({ principal, params }) => ({ body: await keys.get(principal, params.keyId) }),
    }),
    route({
      method: 'DELETE', path: '/v1/keys/{keyId}', summary: 'Revoke a key', tag, access: access.keyManagement,
      params: keyParams,
      responses: { 204: { description: 'Revoked; refused everywhere within a second' } },
      handle: async ({ principal, params }) => {
        await keys.revoke(principal, params.keyId);
        return { status: 204 };
      },
    }),
    route({
      method: 'POST', path: '/v1/introspect', summary: 'Check an API key: its owner, issuer and authorizations', tag,
      access: access.keyManagement, body: introspectSchema,
      responses: { 200: { description: 'An active key of the caller\'s account', schema: introspectionSchema } },
      handle: async ({ principal, body }) => ({ body: await keys.introspect(principal, body) }),
    }),
    route({
      method: 'GET', path: '/.well-known/jwks.json', summary: 'Public key set that verifies SVC_TOKEN JWTs', tag,
      access: access.public,
      responses: { 200: { description: 'JWKS', schema: z.object({ keys: z.array(z.record(z.string(), z.unknown())) }) } },
      handle: async () => ({ body: { keys: [tokenKey.publicJwk] } }),
    }),
  ];
}
