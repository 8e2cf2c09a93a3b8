// Key service contracts (spec 2.2, 4.5, 5.5; wire-reference 8). Bodies are snake_case like the reference.
import { z } from 'zod';
import { knownScopes } from '../../domain/scopes.ts';
import { ncaIdSchema } from '../accounts/schema.ts';

/** YYYY-MM-DDThh:mm:ssZ, optionally with milliseconds (the reference CLI sends .000Z). */
const utcTimestamp = z.string()
  .regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,3})?Z$/, 'must be an ISO 8601 UTC timestamp YYYY-MM-DDThh:mm:ssZ')
  .refine((value) => !Number.isNaN(Date.parse(value)), 'is not a real date');

const scopeSchema = z.string().refine((scope) => knownScopes.has(scope), { error: (issue) => `unknown scope '${String(issue.input)}'` });

export const policySchema = z.object({
  aud: z.string().optional(),
  auds: z.array(z.string()).optional(),
  product: z.string().optional(),
  resources: z.array(z.object({ id: z.string().min(1), type: z.string().min(1) })).optional(),
  scopes: z.array(scopeSchema).min(1, 'must list at least one scope'),
});

export const authorizationsSchema = z.object({
  policies: z.array(policySchema).min(1, 'must hold at least one policy'),
});

export const createKeySchema = z.object({
  description: z.string().max(256).optional(),
  expires_at: utcTimestamp,
  authorizations: authorizationsSchema,
  audience_service_ids: z.array(z.string().min(1)).optional(),
});

export const keyIssuerHeaders = z.object({
  'key-issuer-service': z.string({ error: 'header Key-Issuer-Service is required' }).min(1),
  'key-issuer-id': z.string({ error: 'header Key-Issuer-Id is required' }).min(1),
  'key-owner-id': z.string({ error: 'header Key-Owner-Id is required' }).min(1),
});

/** `svc init` and direct callers of the admin endpoint; every field optional. */
export const mintTokenSchema = z.object({
  ncaId: ncaIdSchema.optional(),
  description: z.string().max(256).optional(),
  expires_at: utcTimestamp.optional(),
  scopes: z.array(scopeSchema).min(1).optional(),
});

export const keySchema = z.object({
  id: z.string(),
  value: z.string().optional(),
  status: z.enum(['ACTIVE', 'EXPIRED', 'REVOKED']),
  type: z.enum(['SVC_TOKEN', 'SVC_API_KEY', 'SVC_TASK_API_KEY']),
  nca_id: z.string(),
  owner_type: z.string(),
  owner_id: z.string(),
  issuer_service: z.string(),
  issuer_service_id: z.string(),
  audience_service_ids: z.array(z.string()),
  description: z.string(),
  authorizations: authorizationsSchema,
  created_at: z.string(),
  expires_at: z.string(),
  revoked_at: z.string().optional(),
}).meta({ id: 'ApiKey' });

export const keyParams = z.object({ keyId: z.guid('must be a key id (UUID)') });
export const listKeysQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(100),
  cursor: z.string().optional(),
});
export const keyListResponse = z.object({ keys: z.array(keySchema), cursor: z.string().optional() });

/** POST /v1/introspect: the reference CLI's `api-key generate --validate` (wire-reference 8). */
export const introspectSchema = z.object({
  audience_service_id: z.string().min(1).optional(),
  key: z.string().min(1, 'must be the API key to check'),
});
export const introspectionSchema = z.object({
  owner_type: z.string(),
  owner_id: z.string(),
  key_id: z.string(),
  issuer_service_id: z.string(),
  authorizations: authorizationsSchema,
}).meta({ id: 'KeyIntrospection' });

/** GET /v2/svc/whoami (api host): the presented credential. */
export const whoamiSchema = z.object({
  credentialId: z.string(),
  kind: z.enum(['token', 'api-key', 'task-key', 'admin']),
  ncaId: z.string(),
  ownerId: z.string(),
  scopes: z.array(z.string()),
});

export type CreateKey = z.infer<typeof createKeySchema>;
export type Introspect = z.infer<typeof introspectSchema>;
export type Introspection = z.infer<typeof introspectionSchema>;
export type KeyIssuerHeaders = z.infer<typeof keyIssuerHeaders>;
export type MintToken = z.infer<typeof mintTokenSchema>;
export type ApiKey = z.infer<typeof keySchema>;
