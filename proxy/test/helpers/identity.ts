// A real identity provider for the tests: an ES256 key pair (jose) and its JWKS served over HTTP.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWTPayload } from 'jose';

export const ISSUER = 'https://id.test.example';
export const AUDIENCE = 'svc-streaming-proxy';

export interface IdentityProvider {
  jwksUrl: string;
  /** A signed user token; `claims` override the defaults (sub, svc_functions). */
  token(claims?: JWTPayload, options?: { expiresIn?: string | number; issuer?: string; audience?: string; key?: 'trusted' | 'untrusted' }): Promise<string>;
  /** How many times the JWKS was fetched. */
  readonly fetches: number;
  close(): Promise<void>;
}

export async function startIdentityProvider(): Promise<IdentityProvider> {
  const trusted = await generateKeyPair('ES256', { extractable: true });
  const untrusted = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(trusted.publicKey)), kid: 'test-key-1', alg: 'ES256', use: 'sig' };
  const body = JSON.stringify({ keys: [jwk] });
  let fetches = 0;
  const server = http.createServer((req, res) => {
    fetches++;
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  async function sign(key: CryptoKey, claims: JWTPayload, options: { expiresIn?: string | number; issuer?: string; audience?: string }) {
    return new SignJWT({ sub: 'user-1', ...claims })
      .setProtectedHeader({ alg: 'ES256', kid: 'test-key-1' })
      .setIssuedAt()
      .setIssuer(options.issuer ?? ISSUER)
      .setAudience(options.audience ?? AUDIENCE)
      .setExpirationTime(options.expiresIn ?? '5m')
      .sign(key);
  }

  return {
    jwksUrl: `http://127.0.0.1:${port}/.well-known/jwks.json`,
    token: (claims = {}, options = {}) => sign(options.key === 'untrusted' ? untrusted.privateKey : trusted.privateKey, claims, options),
    get fetches() {
      return fetches;
    },
    close: () => new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
