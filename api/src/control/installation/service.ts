// What an installation sets up once and every replica then shares: the secrets key ring (checked
// against the store so a wrong key fails at start, not at first decrypt) and the bootstrap secret.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { createSecretBox, parseKey, type SecretBox } from '../../store/encryption.ts';
import { hashSecret, newBootstrapSecret } from '../keys/key-format.ts';
import type { ClustersService } from '../clusters/service.ts';
import type { Gpu } from '../clusters/schema.ts';
import { unsealSetting, type SettingsRepo } from './repo.ts';

const KEY_CHECK = 'secrets.key_check';
const KEY_CHECK_PLAINTEXT = 'svc-secrets-key-check';
const BOOTSTRAP = 'installation.bootstrap_secret';
/** How long a bootstrap secret works when it is not used first. */
export const BOOTSTRAP_LIFETIME_SECONDS = 24 * 3600;
const bootstrapSchema = z.object({ hash: z.string(), expiresAt: z.string(), secret: z.string().optional(), spentAt: z.string().optional() });

/**
 * The key ring from configuration, or, for the embedded default, a key generated once into the data
 * directory (mode 0600). Fails with one line when the store was sealed with a different key.
 */
export async function loadSecretBox(
  settings: SettingsRepo,
  options: { key?: string; previousKeys: string[]; dataDir: string; now: string },
): Promise<SecretBox> {
  const current = options.key ? parseKey(options.key, 'SVC_SECRETS_KEY') : localKey(options.dataDir);
  const box = createSecretBox(current, options.previousKeys.map((key) => parseKey(key, 'SVC_SECRETS_PREVIOUS_KEYS')));
  const { value } = await settings.getOrCreate(KEY_CHECK, () => box.encrypt(KEY_CHECK_PLAINTEXT), options.now);
  let readable = false;
  try {
    readable = box.decrypt(value) === KEY_CHECK_PLAINTEXT;
  } catch {
    readable = false;
  }
  if (!readable) {
    // Name the key that was used: the setting when one was given, else the file generated beside the store.
    const used = options.key ? 'secrets.key (SVC_SECRETS_KEY)' : `${path.join(options.dataDir, 'secrets.key')} (the generated secrets key)`;
    throw new Error(`${used} does not match the key this store was sealed with; a store sealed elsewhere needs that installation's key (docs/security.md)`);
  }
  // After a rotation the check value moves to the new key, so the old one can later leave the ring.
  if (value.split(':')[1] !== box.currentKeyId) await settings.replace(KEY_CHECK, box.encrypt(KEY_CHECK_PLAINTEXT));
  return box;
}

function localKey(dataDir: string): Buffer {
  const file = path.join(dataDir, 'secrets.key');
  if (!existsSync(file)) {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(file, randomBytes(32).toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
  }
  return parseKey(readFileSync(file, 'utf8').trim(), file);
}

export interface BootstrapSecret {
  /** The secret while it still works (`svc serve` prints it), else undefined. */
  unused?: string;
  expiresAt: string;
  /** True when `secret` is the installation's, not used yet and not expired. */
  check(secret: string): Promise<boolean>;
  /** Marks it used: true for exactly one caller, however many race. */
  spend(): Promise<boolean>;
}

/**
 * The bootstrap secret mints the first management token. Generated at the first start and kept sealed in
 * the store, it works once, and for BOOTSTRAP_LIFETIME_SECONDS at most; then only its hash stays. A new one:
 * docs/security.md, "The bootstrap secret".
 */
export async function loadBootstrapSecret(settings: SettingsRepo, box: SecretBox, now: () => Date): Promise<BootstrapSecret> {
  const stateOf = (sealed: string) => unsealSetting(box, bootstrapSchema, BOOTSTRAP, sealed);
  const works = (state: z.infer<typeof bootstrapSchema>) => state.secret !== undefined && Date.parse(state.expiresAt) > now().getTime();
  /** The stored secret while it works, and its sealed form (what a spend compares and sets). */
  const working = async () => {
    const sealed = await settings.get(BOOTSTRAP);
    if (sealed === undefined) return undefined;
    const state = stateOf(sealed);
    return works(state) ? { sealed, state } : undefined;
  };
  const { value } = await settings.getOrCreate(BOOTSTRAP, () => {
    const secret = newBootstrapSecret();
    const expiresAt = new Date(now().getTime() + BOOTSTRAP_LIFETIME_SECONDS * 1000).toISOString();
    return box.encrypt(JSON.stringify({ hash: hashSecret(secret), expiresAt, secret }));
  }, now().toISOString());
  const state = stateOf(value);
  return {
    unused: works(state) ? state.secret : undefined,
    expiresAt: state.expiresAt,
    async check(secret) {
      const found = await working();
      return found !== undefined && timingSafeEqual(Buffer.from(found.state.hash, 'hex'), Buffer.from(hashSecret(secret), 'hex'));
    },
    async spend() {
      const found = await working();
      if (!found) return false;
      const spent = { hash: found.state.hash, expiresAt: found.state.expiresAt, spentAt: now().toISOString() };
      return settings.compareAndSet(BOOTSTRAP, found.sealed, box.encrypt(JSON.stringify(spent)));
    },
  };
}

/** The bootstrap secret while it works, read without making one (`svc bootstrap secret`). */
export async function unusedBootstrapSecret(settings: SettingsRepo, box: SecretBox, now: Date): Promise<{ secret: string; expiresAt: string } | undefined> {
  const sealed = await settings.get(BOOTSTRAP);
  if (sealed === undefined) return undefined;
  const { secret, expiresAt } = unsealSetting(box, bootstrapSchema, BOOTSTRAP, sealed);
  return secret !== undefined && Date.parse(expiresAt) > now.getTime() ? { secret, expiresAt } : undefined;
}

const LOCAL_CLUSTER = 'installation.local_cluster';
const localClusterSchema = z.object({ clusterId: z.string(), agentCredential: z.string() });

/**
 * The embedded default registers this machine as one cluster at first start. Its agent credential is
 * kept sealed in the store so the in-process agent can connect with it like any other agent.
 */
export async function ensureLocalCluster(
  settings: SettingsRepo,
  clusters: ClustersService,
  box: SecretBox,
  options: { ncaId: string; name: string; groupName: string; gpus: Gpu[]; now: string },
): Promise<z.infer<typeof localClusterSchema>> {
  const existing = await settings.get(LOCAL_CLUSTER);
  if (existing) return unsealSetting(box, localClusterSchema, LOCAL_CLUSTER, existing);
  const { row, agentCredential } = await clusters.registerLocal(options.ncaId, options.name, options.groupName, options.gpus);
  const local = { clusterId: row.id, agentCredential };
  const { value } = await settings.getOrCreate(LOCAL_CLUSTER, () => box.encrypt(JSON.stringify(local)), options.now);
  return unsealSetting(box, localClusterSchema, LOCAL_CLUSTER, value);
}

/**
 * A secret of the installation generated once and kept sealed: `turn.secret` (the TURN REST credentials'
 * shared secret, when configuration gives none), `urls.signing_key` (signed asset and result URLs),
 * `replicas.signing_key` (what API replicas tell each other over NATS, invocation/replica-signing.ts),
 * `metrics.token` (the bearer of /metrics off loopback, when configuration gives none).
 */
export type SealedSecretName = 'turn.secret' | 'urls.signing_key' | 'replicas.signing_key' | 'metrics.token';

export async function ensureSealedSecret(settings: SettingsRepo, box: SecretBox, name: SealedSecretName, now: string): Promise<string> {
  const { value } = await settings.getOrCreate(name, () => box.encrypt(randomBytes(32).toString('base64url')), now);
  return box.decrypt(value);
}

/** Such a secret if one was generated (`svc metrics token` reads it without making one). */
export async function sealedSecret(settings: SettingsRepo, box: SecretBox, name: SealedSecretName): Promise<string | undefined> {
  const sealed = await settings.get(name);
  return sealed === undefined ? undefined : box.decrypt(sealed);
}
