// What an installation sets up once and every replica then shares: the secrets key ring (checked
// against the store so a wrong key fails at start, not at first decrypt) and the bootstrap secret.
import { randomBytes } from 'node:crypto';
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
const BOOTSTRAP_HASH = 'installation.bootstrap_secret_hash';

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

/**
 * The bootstrap secret guards the endpoint that mints management tokens. It is generated at first
 * start and returned only then, for the caller to print once; the store keeps its hash.
 */
export async function ensureBootstrapSecret(settings: SettingsRepo, now: string): Promise<{ hash: string; secret?: string }> {
  const secret = newBootstrapSecret();
  const { value, created } = await settings.getOrCreate(BOOTSTRAP_HASH, () => hashSecret(secret), now);
  return created ? { hash: value, secret } : { hash: value };
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
 * `replicas.signing_key` (what API replicas tell each other over NATS, invocation/replica-signing.ts).
 */
export async function ensureSealedSecret(
  settings: SettingsRepo, box: SecretBox, name: 'turn.secret' | 'urls.signing_key' | 'replicas.signing_key', now: string,
): Promise<string> {
  const { value } = await settings.getOrCreate(name, () => box.encrypt(randomBytes(32).toString('base64url')), now);
  return box.decrypt(value);
}
