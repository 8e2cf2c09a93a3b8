// Test certificates made with selfsigned: a private CA, and server certificates it signs.
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import selfsigned from 'selfsigned';

export interface TestCa {
  cert: string;
  key: string;
  /** The CA certificate written to a file, for SVC_CA_FILE. */
  certFile: string;
}

export interface ServerCertificate {
  cert: string;
  key: string;
}

export async function createTestCa(name = 'svc proxy test CA'): Promise<TestCa> {
  const pems = await selfsigned.generate([{ name: 'commonName', value: name }], {
    keyType: 'ec',
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    ],
  });
  const certFile = path.join(mkdtempSync(path.join(os.tmpdir(), 'proxy-ca-')), 'ca.pem');
  writeFileSync(certFile, pems.cert);
  return { cert: pems.cert, key: pems.private, certFile };
}

export async function issueServerCertificate(ca: TestCa, dnsNames: string[], ips: string[] = ['127.0.0.1']): Promise<ServerCertificate> {
  const pems = await selfsigned.generate([{ name: 'commonName', value: dnsNames[0] ?? 'localhost' }], {
    keyType: 'ec',
    algorithm: 'sha256',
    ca: { cert: ca.cert, key: ca.key },
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [...dnsNames.map((value) => ({ type: 2 as const, value })), ...ips.map((ip) => ({ type: 7 as const, ip }))] },
    ],
  });
  return { cert: pems.cert, key: pems.private };
}
