// TLS to the platform is verified: an unknown CA is refused, SVC_CA_FILE makes a private CA trusted.
// PROXY_SSL_INSECURE=true serves browsers over TLS with a fresh self-signed certificate.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import tls from 'node:tls';
import { after, before, describe, test } from 'node:test';
import { closed, expectOpen, expectRefused, openWebSocket } from './helpers/browser.ts';
import { createTestCa, issueServerCertificate } from './helpers/pki.ts';
import { startFakePlatform, type FakePlatform } from './helpers/platform-upstream.ts';
import { startProxy } from './helpers/proxy.ts';

describe('TLS towards the platform', () => {
  let platform: FakePlatform;

  before(async () => { platform = await startFakePlatform(); });
  after(() => platform.close());

  test('a platform certificate from an unknown CA is refused: 502 problem+json with CORS, no upgrade', async (t) => {
    const otherCa = await createTestCa('someone else');
    const running = await startProxy(platform, undefined, { SVC_CA_FILE: otherCa.certFile });
    t.after(() => running.close());
    const upgradesBefore = platform.upgrades.length;
    const refused = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`));
    assert.equal(refused.status, 502);
    assert.equal(refused.headers['content-type'], 'application/problem+json');
    assert.equal(refused.headers['access-control-allow-origin'], '*');
    assert.match(JSON.parse(refused.body).detail, /certificate could not be verified/);
    assert.equal(platform.upgrades.length, upgradesBefore);
  });

  test('without SVC_CA_FILE the system roots alone do not trust a private CA', async (t) => {
    const running = await startProxy(platform, undefined, { SVC_CA_FILE: '' });
    t.after(() => running.close());
    assert.equal(expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`)).status, 502);
  });

  test('SVC_CA_FILE with the platform\'s CA: accepted, verified against the Host name', async (t) => {
    const running = await startProxy(platform, undefined);
    t.after(() => running.close());
    const open = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
    open.ws.close();
    await closed(open.ws);
  });

  test('a Host the certificate does not name is refused (hostname verification is on)', async (t) => {
    const running = await startProxy(platform, undefined, { SVC_SERVER_HOST: 'api.not-in-the-certificate.example' });
    t.after(() => running.close());
    assert.equal(expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`)).status, 502);
  });

  test('SVC_TLS_SKIP_VERIFY=true (development) connects to an untrusted platform', async (t) => {
    const running = await startProxy(platform, undefined, { SVC_CA_FILE: '', SVC_TLS_SKIP_VERIFY: 'true' });
    t.after(() => running.close());
    const open = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
    open.ws.close();
    await closed(open.ws);
  });

  test('an unreachable platform: 502 problem+json with CORS', async (t) => {
    const running = await startProxy(platform, undefined, { SVC_SERVER: 'https://127.0.0.1:1' });
    t.after(() => running.close());
    const refused = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`));
    assert.equal(refused.status, 502);
    assert.equal(refused.headers['access-control-allow-origin'], '*');
  });
});

describe('a platform that does not answer', () => {
  test('upgrade and plain request: 504 problem+json with CORS after the server timeout', async () => {
    const platform = await startFakePlatform();
    const certificate = await issueServerCertificate(platform.ca, [platform.host]);
    // Accepts TLS, then never answers.
    const silent = https.createServer(certificate, () => {});
    silent.on('upgrade', () => {});
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const running = await startProxy(platform, undefined, {
      SVC_SERVER: `https://127.0.0.1:${(silent.address() as AddressInfo).port}`,
      PROXY_TIMEOUT_SERVER_MS: '300', PROXY_TIMEOUT_CLIENT_MS: '300', PROXY_PING_INTERVAL_MS: '100',
    });
    try {
      const refused = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`));
      assert.equal(refused.status, 504);
      assert.equal(refused.headers['access-control-allow-origin'], '*');
      assert.equal(JSON.parse(refused.body).type, 'urn:svc:problem-details:gateway-timeout');
      const response = await fetch(`${running.url}/v2/anything`);
      assert.equal(response.status, 504);
      assert.equal(response.headers.get('access-control-allow-origin'), '*');
    } finally {
      await running.close();
      silent.closeAllConnections();
      silent.close();
      await platform.close();
    }
  });
});

describe('PROXY_SSL_INSECURE=true', () => {
  test('serves TLS with a self-signed sha256 certificate for localhost and 127.0.0.1', async () => {
    const platform = await startFakePlatform();
    const running = await startProxy(platform, undefined, { PROXY_SSL_INSECURE: 'true' });
    try {
      assert.match(running.wsUrl, /^wss:/);
      const socket = tls.connect({ port: running.port, host: '127.0.0.1', rejectUnauthorized: false });
      await once(socket, 'secureConnect');
      const certificate = new X509Certificate(socket.getPeerCertificate().raw);
      socket.destroy();
      assert.match(certificate.subjectAltName ?? '', /DNS:localhost/);
      assert.match(certificate.subjectAltName ?? '', /IP Address:127\.0\.0\.1/);
      assert.match(certificate.signatureAlgorithm ?? '', /sha256/i);
      assert.equal(certificate.issuer, certificate.subject, 'self-signed');
      assert.ok(certificate.verify(certificate.publicKey));
      // A client trusting exactly this certificate can use the proxy.
      const open = expectOpen(await openWebSocket(`wss://localhost:${running.port}/sign_in`, [], { rejectUnauthorized: true, ca: certificate.toString() }));
      open.ws.close();
      await closed(open.ws);
    } finally {
      await running.close();
      await platform.close();
    }
  });
});
