// Resume support: the platform's svc-request-id cookie is moved to the proxy's site (on the 101 too),
// and a reconnecting browser's cookie takes it back to the same session.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Cookie } from 'tough-cookie';
import { alignSetCookies } from '../src/cookies.ts';
import { closed, expectOpen, expectRefused, openWebSocket } from './helpers/browser.ts';
import { startFakePlatform, type FakePlatform } from './helpers/platform-upstream.ts';
import { startProxy, type RunningProxy } from './helpers/proxy.ts';

function onlyCookie(setCookie: string | string[] | undefined): Cookie {
  const values = Array.isArray(setCookie) ? setCookie : setCookie ? [setCookie] : [];
  assert.equal(values.length, 1, `one Set-Cookie expected, got ${JSON.stringify(setCookie)}`);
  const cookie = Cookie.parse(values[0]);
  assert.ok(cookie);
  return cookie;
}

describe('alignSetCookies', () => {
  test('TLS: host-only, the proxy\'s path, SameSite=None; Secure; other attributes kept', () => {
    const [aligned] = alignSetCookies('svc-request-id=abc; Domain=api.svc.example; Path=/v2; HttpOnly; SameSite=Strict; Max-Age=300', { secure: true, path: '/' });
    assert.equal(aligned, 'svc-request-id=abc; Max-Age=300; Path=/; Secure; HttpOnly; SameSite=None');
  });

  test('plain HTTP: no Secure (browsers would refuse it), SameSite=Lax; a configured domain is used', () => {
    const [aligned] = alignSetCookies(['svc-request-id=abc; Domain=api.svc.example; Secure; HttpOnly'], { secure: false, domain: 'stream.example', path: '/play' });
    assert.equal(aligned, 'svc-request-id=abc; Domain=stream.example; Path=/play; HttpOnly; SameSite=Lax');
  });

  test('a clearing cookie stays a clearing cookie', () => {
    const [aligned] = alignSetCookies('svc-request-id=; Domain=api.svc.example; Path=/; Max-Age=0', { secure: true, path: '/' });
    assert.equal(aligned, 'svc-request-id=; Max-Age=0; Path=/; Secure; SameSite=None');
  });
});

for (const tls of [true, false]) {
  describe(`cookie alignment through a ${tls ? 'TLS' : 'plain HTTP'} proxy`, () => {
    let platform: FakePlatform;
    let running: RunningProxy;

    before(async () => {
      platform = await startFakePlatform();
      running = await startProxy(platform, undefined, tls ? { PROXY_SSL_INSECURE: 'true' } : {});
    });
    after(async () => {
      await running.close();
      await platform.close();
    });

    test('the 101\'s svc-request-id cookie is rewritten to the proxy\'s domain and path; svc-reqid passes', async () => {
      const first = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
      const cookie = onlyCookie(first.headers['set-cookie']);
      assert.equal(cookie.key, 'svc-request-id');
      assert.equal(cookie.value, first.first.sessionId);
      assert.equal(cookie.domain, null, 'host-only: it belongs to the proxy\'s host');
      assert.equal(cookie.path, '/');
      assert.equal(cookie.secure, tls);
      assert.equal(cookie.sameSite, tls ? 'none' : 'lax');
      assert.equal(cookie.httpOnly, true);
      assert.equal(first.headers['svc-reqid'], first.first.sessionId);
      assert.equal(first.headers['access-control-allow-origin'], '*', 'CORS on the 101 too');
      first.ws.close();
      await closed(first.ws);
    });

    test('a dropped WebSocket reconnects with the cookie to the same session', async () => {
      const first = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
      const cookie = onlyCookie(first.headers['set-cookie']);
      assert.equal(first.first.resumed, false);
      first.ws.terminate(); // a drop, not a goodbye

      const again = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`, [], { headers: { cookie: cookie.cookieString() } }));
      assert.equal(again.first.resumed, true);
      assert.equal(again.first.sessionId, first.first.sessionId);
      assert.equal(platform.upgrades.at(-1)?.headers.cookie, `svc-request-id=${first.first.sessionId}`);
      again.ws.close();
      await closed(again.ws);
    });

    test('an unknown session: the platform\'s 404 reaches the browser with CORS and the cookie cleared on the proxy\'s site', async () => {
      const refused = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`, [], { headers: { cookie: 'svc-request-id=00000000-0000-4000-8000-000000000000' } }));
      assert.equal(refused.status, 404);
      assert.equal(refused.headers['access-control-allow-origin'], '*');
      assert.equal(refused.headers['access-control-expose-headers'], '*');
      assert.equal(refused.headers['access-control-allow-headers'], '*');
      const cleared = onlyCookie(refused.headers['set-cookie']);
      assert.equal(cleared.key, 'svc-request-id');
      assert.equal(cleared.value, '');
      assert.equal(cleared.maxAge, 0);
      assert.equal(cleared.domain, null);
      assert.equal(cleared.path, '/');
      assert.equal(JSON.parse(refused.body).status, 404);
    });
  });
}
