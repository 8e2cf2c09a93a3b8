// TLS for the browser side. PROXY_SSL_INSECURE=true (development only) makes a fresh self-signed
// certificate at every start: sha256, P-256 key, SAN localhost / 127.0.0.1 / ::1. Browsers and other
// clients must be told to accept it. PROXY_TLS_CERT + PROXY_TLS_KEY serve a real certificate.
import { readFileSync } from 'node:fs';
import selfsigned from 'selfsigned';
import { ConfigError, type ListenConfig } from './config.ts';

export interface TlsMaterial {
  cert: string;
  key: string;
}

export async function selfSignedCertificate(): Promise<TlsMaterial> {
  const now = new Date();
  const pems = await selfsigned.generate([{ name: 'commonName', value: 'localhost' }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    notBeforeDate: new Date(now.getTime() - 60_000),
    notAfterDate: new Date(now.getTime() + 30 * 86_400_000),
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }, { type: 7, ip: '127.0.0.1' }, { type: 7, ip: '::1' }] },
    ],
  });
  return { cert: pems.cert, key: pems.private };
}

export async function listenTls(listen: ListenConfig): Promise<TlsMaterial | undefined> {
  if (listen.tls === 'self-signed') return selfSignedCertificate();
  if (listen.tls === 'files' && listen.certFile && listen.keyFile) {
    return { cert: readPem('PROXY_TLS_CERT', listen.certFile), key: readPem('PROXY_TLS_KEY', listen.keyFile) };
  }
  return undefined;
}

function readPem(variable: string, file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    throw new ConfigError(`proxy: ${variable} cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
}
