// Who may call, as main.ts composes it: the bootstrap secret, the key that signs management tokens, the
// admin signing key (a file), the verifier every request passes, and the key service with its routes.
import path from 'node:path';
import type { Kysely } from 'kysely';
import type { Database } from '../../store/schema.ts';
import type { Config } from '../../config.ts';
import type { SecretBox } from '../../store/encryption.ts';
import type { AccountsService } from '../accounts/service.ts';
import type { SettingsRepo } from '../installation/repo.ts';
import { loadBootstrapSecret } from '../installation/service.ts';
import { createKeysRepo } from './repo.ts';
import { keyRoutes } from './routes.ts';
import { createKeyService } from './service.ts';
import { loadAdminKey, loadTokenKey } from './signing.ts';
import { createCredentialVerifier } from './verifier.ts';

export interface KeysPlaneParts {
  config: Pick<Config, 'keys' | 'admin' | 'store'>;
  db: Kysely<Database>;
  settings: SettingsRepo;
  box: SecretBox;
  accounts: AccountsService;
  /** The account keys are made for when a request names none. */
  defaultAccountId: string;
  now: () => Date;
}

export async function createKeysPlane(parts: KeysPlaneParts) {
  const { config, settings, box, now } = parts;
  const bootstrap = await loadBootstrapSecret(settings, box, now);
  const tokenKey = await loadTokenKey(settings, box, now().toISOString());
  const adminSigningKeyFile = config.admin.signingKeyFile ?? path.join(config.store.dataDir, 'admin-signing-key.pem');
  const adminKey = await loadAdminKey(adminSigningKeyFile, { create: !config.admin.signingKeyFile });
  const repo = createKeysRepo(parts.db);
  const verifier = createCredentialVerifier({
    repo, tokenKey, adminKey, bootstrap, serviceId: config.keys.serviceId, recheckMs: config.keys.recheckMs, now: () => now().getTime(),
  });
  const keys = createKeyService({
    repo, accounts: parts.accounts, tokenKey, serviceId: config.keys.serviceId, defaultAccountId: parts.defaultAccountId,
    tokenLifetimeSeconds: config.keys.tokenLifetimeSeconds, spendBootstrap: bootstrap.spend, now,
  });
  return { bootstrap, adminSigningKeyFile, verifier, keys, routes: keyRoutes(keys, tokenKey) };
}
