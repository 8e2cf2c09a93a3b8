// Opaque API keys: <prefix><43 base64url chars of 32 random bytes><21-char checksum>. The checksum lets
// a typo or a foreign string be refused without touching the store; the store keeps only SHA-256.
import { createHash, randomBytes } from 'node:crypto';

export const API_KEY_PREFIX = 'svcapi-';
export const BOOTSTRAP_PREFIX = 'svcboot-';
const BODY_LENGTH = 43;
const CHECKSUM_LENGTH = 21;

function checksum(prefixAndBody: string): string {
  return createHash('sha256').update(prefixAndBody).digest('base64url').slice(0, CHECKSUM_LENGTH);
}

export function newApiKey(): string {
  const body = API_KEY_PREFIX + randomBytes(32).toString('base64url');
  return body + checksum(body);
}

/** True when `value` has the key's shape and a matching checksum. */
export function isWellFormedApiKey(value: string): boolean {
  if (!value.startsWith(API_KEY_PREFIX)) return false;
  if (value.length !== API_KEY_PREFIX.length + BODY_LENGTH + CHECKSUM_LENGTH) return false;
  const body = value.slice(0, -CHECKSUM_LENGTH);
  return checksum(body) === value.slice(-CHECKSUM_LENGTH);
}

export function newBootstrapSecret(): string {
  return BOOTSTRAP_PREFIX + randomBytes(32).toString('base64url');
}

export function hashSecret(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}
