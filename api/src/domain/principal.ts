// Who a request acts as: the principal every credential resolves to, which services take (they never see
// the request). The access rules that check it against a route live in http/auth.ts.

/**
 * token: SVC_TOKEN (management JWT); api-key: SVC_API_KEY; task-key: SVC_TASK_API_KEY;
 * admin: account-administration JWT (spec 5.4); bootstrap: the installation's bootstrap secret;
 * anonymous: the caller of a public route.
 */
export type CredentialKind = 'token' | 'api-key' | 'task-key' | 'admin' | 'bootstrap' | 'anonymous';

export interface Principal {
  credentialId: string;
  kind: CredentialKind;
  /** Account the credential acts for; '*' for installation-wide credentials (admin, bootstrap). */
  ncaId: string;
  ownerId: string;
  scopes: ReadonlySet<string>;
}

/** The one verifier every bearer goes through. Rejects with a 401 Problem. */
export interface CredentialVerifier {
  verify(bearer: string): Promise<Principal>;
}

export const anonymous: Principal = { credentialId: 'anonymous', kind: 'anonymous', ncaId: '', ownerId: '', scopes: new Set() };
