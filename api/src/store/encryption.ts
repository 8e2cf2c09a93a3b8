// Encryption at rest for secrets the platform must read back (function and task secrets, its own
// signing key): AES-256-GCM under a key ring. New data uses the current key; older keys stay listed
// only to decrypt until the data is re-encrypted (docs/security.md, "Rotating the secrets key").
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

export interface SecretBox {
  encrypt(plaintext: string): string;
  decrypt(sealed: string): string;
  /** Identifier of the key new data is sealed with. */
  currentKeyId: string;
}

export function keyId(key: Buffer): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 8);
}

/** Parses a base64 AES-256 key; throws a one-line error naming `setting` when it is not 32 bytes. */
export function parseKey(encoded: string, setting: string): Buffer {
  const key = Buffer.from(encoded, 'base64');
  if (key.length !== 32) throw new Error(`${setting} must be 32 bytes of base64 (got ${key.length} bytes)`);
  return key;
}

export function createSecretBox(current: Buffer, previous: Buffer[] = []): SecretBox {
  const ring = new Map<string, Buffer>();
  for (const key of [current, ...previous]) ring.set(keyId(key), key);
  const currentKeyId = keyId(current);
  return {
    currentKeyId,
    encrypt(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', current, iv);
      const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return ['v1', currentKeyId, iv.toString('base64'), cipher.getAuthTag().toString('base64'), body.toString('base64')].join(':');
    },
    decrypt(sealed) {
      const [version, kid, iv, tag, body] = sealed.split(':');
      const key = ring.get(kid);
      if (version !== 'v1' || !key) throw new Error(`no secrets key ${kid} in the key ring`);
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64'));
      decipher.setAuthTag(Buffer.from(tag, 'base64'));
      return Buffer.concat([decipher.update(Buffer.from(body, 'base64')), decipher.final()]).toString('utf8');
    },
  };
}
