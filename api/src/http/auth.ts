// Bearer credentials → principal, and the access rule each route declares (spec 5.3).
import { anonymous, type CredentialKind, type CredentialVerifier, type Principal } from '../domain/principal.ts';
import { forbidden, unauthorized } from '../domain/problem.ts';
import type { Scope } from '../domain/scopes.ts';

export type Access =
  | { public: true }
  | { anyOf: readonly string[]; credentials: readonly CredentialKind[] };

const kindNames: Record<CredentialKind, string> = {
  token: 'SVC_TOKEN',
  'api-key': 'SVC_API_KEY',
  'task-key': 'SVC_TASK_API_KEY',
  admin: 'an account-administration token',
  bootstrap: 'the installation bootstrap secret',
  anonymous: 'no credential',
};

export const access = {
  public: { public: true } as Access,
  /** Function-plane endpoints: SVC_TOKEN or SVC_API_KEY carrying one of the scopes (rule 1). */
  functions: (...anyOf: Scope[]): Access => ({ anyOf, credentials: ['token', 'api-key'] }),
  /** Task endpoints: only task keys (rule 4). */
  tasks: (...anyOf: Scope[]): Access => ({ anyOf, credentials: ['task-key'] }),
  /** Self-hosted cluster endpoints: SVC_TOKEN only. */
  tokenOnly: (...anyOf: Scope[]): Access => ({ anyOf, credentials: ['token'] }),
  /** Account administration: an admin JWT, or any credential carrying account_setup (spec 5.2, 5.4). */
  accountAdmin: { anyOf: ['account_setup'], credentials: ['admin', 'token', 'api-key'] } as Access,
  /** Key management on the key service: the management token of the account. */
  keyManagement: { anyOf: [], credentials: ['token'] } as Access,
  /** Minting management tokens: the bootstrap secret (once), or an account-administration token. */
  installationAdmin: { anyOf: [], credentials: ['bootstrap', 'admin'] } as Access,
};

export function bearerOf(authorization: string | undefined): string | undefined {
  if (!authorization) return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return match?.[1];
}

/** Resolves and checks the caller; public routes get the anonymous principal. */
export async function authorize(
  rule: Access,
  authorization: string | undefined,
  verifier: CredentialVerifier,
): Promise<Principal> {
  if ('public' in rule) return anonymous;
  const bearer = bearerOf(authorization);
  if (!bearer) {
    throw unauthorized(authorization ? 'Authorization header must be "Bearer <credential>"' : 'Missing bearer credential');
  }
  const principal = await verifier.verify(bearer);
  if (!rule.credentials.includes(principal.kind)) {
    const accepted = rule.credentials.map((kind) => kindNames[kind]).join(' or ');
    throw forbidden(`This endpoint accepts ${accepted}; the credential presented is ${kindNames[principal.kind]}`);
  }
  if (rule.anyOf.length > 0 && !rule.anyOf.some((scope) => principal.scopes.has(scope))) {
    const needed = rule.anyOf.length === 1 ? `scope '${rule.anyOf[0]}'` : `one of the scopes ${rule.anyOf.map((s) => `'${s}'`).join(', ')}`;
    throw forbidden(`The credential lacks ${needed}`);
  }
  return principal;
}
