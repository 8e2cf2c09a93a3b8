// The two ES256 keys behind JWT credentials:
// - the key service's signing key (SVC_TOKEN), created at first start and kept encrypted in the store so
//   every replica signs and verifies with the same key; its public half is published as a JWKS;
// - the account-administration key (spec 5.4), a PEM file standing in for the secret store's admin
//   signing role; `svc admin token` signs with it where the file is readable.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  calculateJwkThumbprint, exportJWK, exportPKCS8, generateKeyPair, importJWK, importPKCS8, jwtVerify, SignJWT,
  type CryptoKey, type JWK, type JWTPayload,
} from 'jose';
import { z } from 'zod';
import type { SecretBox } from '../../store/encryption.ts';
import { unsealSetting, type SettingsRepo } from '../installation/repo.ts';

export const TOKEN_ISSUER = 'svc-api-keys';
export const ADMIN_ISSUER = 'svc-admin';
const ALG = 'ES256';
const SIGNING_KEY = 'keys.signing';

/** The signing key as the store keeps it: an ES256 private JWK. */
const privateJwkSchema = z.object({
  kty: z.literal('EC'), crv: z.literal('P-256'), x: z.string(), y: z.string(), d: z.string(), kid: z.string().optional(),
});

export interface JwtKey {
  kid: string;
  privateKey?: CryptoKey;
  publicKey: CryptoKey;
  publicJwk: JWK;
}

export async function signJwt(key: JwtKey, claims: JWTPayload & { iss: string; aud: string; sub: string }, expiresAt: Date) {
  if (!key.privateKey) throw new Error('this key can verify but not sign');
  return new SignJWT(claims)
    .setProtectedHeader({ alg: ALG, kid: key.kid, typ: 'JWT' })
    .setIssuedAt()
    .setExpirationTime(Math.floor(expiresAt.getTime() / 1000))
    .sign(key.privateKey);
}

/** Verifies signature, algorithm, issuer, audience and expiry. Throws jose errors. */
export async function verifyJwt(key: JwtKey, token: string, issuer: string, audience: string, now: Date) {
  const { payload } = await jwtVerify(token, key.publicKey, {
    algorithms: [ALG], issuer, audience, currentDate: now, typ: 'JWT', requiredClaims: ['exp', 'sub'],
  });
  return payload;
}

async function fromPrivateJwk(privateJwk: JWK): Promise<JwtKey> {
  const { d: _d, ...publicJwk } = privateJwk;
  const kid = privateJwk.kid ?? await calculateJwkThumbprint(publicJwk);
  return {
    kid,
    privateKey: await importJWK(privateJwk, ALG) as CryptoKey,
    publicKey: await importJWK(publicJwk, ALG) as CryptoKey,
    publicJwk: { ...publicJwk, kid, alg: ALG, use: 'sig' },
  };
}

async function newPrivateJwk(): Promise<JWK> {
  const { privateKey } = await generateKeyPair(ALG, { extractable: true });
  const jwk = await exportJWK(privateKey);
  const { d: _d, ...publicJwk } = jwk;
  return { ...jwk, kid: await calculateJwkThumbprint(publicJwk) };
}

/** The key service's signing key: read from the store, or created there on first start. */
export async function loadTokenKey(settings: SettingsRepo, box: SecretBox, now: string): Promise<JwtKey> {
  const fresh = await newPrivateJwk();
  const { value } = await settings.getOrCreate(SIGNING_KEY, () => box.encrypt(JSON.stringify(fresh)), now);
  return fromPrivateJwk(unsealSetting(box, privateJwkSchema, SIGNING_KEY, value));
}

/** Reads the admin signing key PEM; creates it (mode 0600) when `create` and absent. */
export async function loadAdminKey(file: string, options: { create: boolean }): Promise<JwtKey> {
  if (!existsSync(file)) {
    if (!options.create) throw new Error(`admin signing key ${file} does not exist`);
    const { privateKey } = await generateKeyPair(ALG, { extractable: true });
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, await exportPKCS8(privateKey), { mode: 0o600 });
    chmodSync(file, 0o600);
  }
  const privateKey = await importPKCS8(readFileSync(file, 'utf8'), ALG, { extractable: true });
  return fromPrivateJwk(await exportJWK(privateKey));
}
