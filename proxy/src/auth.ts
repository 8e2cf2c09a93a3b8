// User authentication and authorization (spec §4.7 items 1 and 2).
//
// The browser presents a JWT, looked for in this order:
//   1. a Sec-WebSocket-Protocol item `token.<jwt>` (the only header a browser WebSocket can set),
//   2. the cookie `svc-user-token`,
//   3. the query parameter `access_token`.
// It is verified against the identity provider's JWKS (PROXY_AUTH_JWKS_URL) with pinned algorithms
// (ES256, RS256), issuer, audience and a required `exp`. The claim `svc_functions` grants functions:
// an array of function ids, where "*" (or the claim being the string "*") grants every function.
//
// A browser presents the same token again on every reconnect, so a verified token is remembered
// (by its exact text) until it expires, for at most VERIFIED_TTL_MS: a resume skips the signature
// check, and a key withdrawn from the JWKS stops being honoured within that bound.
import { createRemoteJWKSet, errors, jwtVerify, type JWTPayload } from 'jose';
import type { AuthConfig } from './config.ts';
import { Problem } from './problem.ts';

export const TOKEN_COOKIE = 'svc-user-token';
export const TOKEN_QUERY_PARAMETER = 'access_token';
export const FUNCTIONS_CLAIM = 'svc_functions';
export const ALGORITHMS = ['ES256', 'RS256'];
const VERIFIED_TTL_MS = 60_000;
const VERIFIED_MAX_ENTRIES = 2_000;

export type TokenSource = 'subprotocol' | 'cookie' | 'query';

export interface PresentedToken {
  value: string;
  source: TokenSource;
}

export interface AuthorizedUser {
  /** The token's `sub`, for logs; undefined in development mode. */
  subject?: string;
  source?: TokenSource;
}

export interface Authorizer {
  readonly mode: AuthConfig['mode'];
  /** Resolves for a user allowed to reach `functionId`; throws a 401 or 403 Problem otherwise. */
  authorize(token: PresentedToken | undefined): Promise<AuthorizedUser>;
}

export function createAuthorizer(config: AuthConfig, functionId: string): Authorizer {
  if (config.mode === 'disabled') return { mode: 'disabled', authorize: async () => ({}) };
  const { jwksUrl, issuer, audience } = config;
  if (!jwksUrl || !issuer || !audience) throw new Error('jwt auth needs jwksUrl, issuer and audience');
  // jose caches the key set and refetches it (rate limited by the cooldown) when a token names an
  // unknown key id, so a key rotation at the identity provider needs no restart.
  const keys = createRemoteJWKSet(jwksUrl, { timeoutDuration: 5_000, cooldownDuration: 30_000 });
  const verified = new Map<string, { payload: JWTPayload; until: number }>();

  async function verify(token: string): Promise<JWTPayload> {
    const now = Date.now();
    const known = verified.get(token);
    if (known && known.until > now) return known.payload;
    verified.delete(token);
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, keys, { issuer, audience, algorithms: ALGORITHMS, requiredClaims: ['exp'] }));
    } catch (error) {
      throw rejection(error);
    }
    // Maps iterate in insertion order: the first entry is the oldest.
    if (verified.size >= VERIFIED_MAX_ENTRIES) verified.delete(verified.keys().next().value!);
    verified.set(token, { payload, until: Math.min(now + VERIFIED_TTL_MS, (payload.exp ?? 0) * 1000) });
    return payload;
  }

  return {
    mode: 'jwt',
    async authorize(token) {
      if (!token) throw unauthorized(`no user token: send it as the Sec-WebSocket-Protocol item token.<jwt>, the cookie ${TOKEN_COOKIE} or the query parameter ${TOKEN_QUERY_PARAMETER}`);
      const payload = await verify(token.value);
      if (!grants(payload[FUNCTIONS_CLAIM], functionId)) {
        throw new Problem('forbidden', `the user token does not grant function ${functionId} (claim ${FUNCTIONS_CLAIM})`);
      }
      return { subject: typeof payload.sub === 'string' ? payload.sub : undefined, source: token.source };
    },
  };
}

function grants(claim: unknown, functionId: string): boolean {
  if (claim === '*') return true;
  return Array.isArray(claim) && claim.some((entry) => entry === '*' || entry === functionId);
}

function unauthorized(detail: string): Problem {
  return new Problem('unauthorized', detail, { 'www-authenticate': 'Bearer' });
}

function rejection(error: unknown): Problem {
  if (error instanceof errors.JWTExpired) return unauthorized('the user token has expired');
  if (error instanceof errors.JWTClaimValidationFailed) return unauthorized(`the user token's ${error.claim} claim is not accepted`);
  if (error instanceof errors.JWKSTimeout || error instanceof errors.JWKSInvalid || !(error instanceof errors.JOSEError)) {
    // The identity provider's keys could not be fetched: not the user's fault.
    return new Problem('bad-gateway', 'the identity provider\'s signing keys are unavailable');
  }
  return unauthorized('the user token is invalid');
}
