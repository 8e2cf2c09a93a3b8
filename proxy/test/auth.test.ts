// User authentication and authorization in front of the platform: a real JWKS, a real TLS platform.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { closed, expectOpen, expectRefused, openWebSocket } from './helpers/browser.ts';
import { startIdentityProvider, type IdentityProvider } from './helpers/identity.ts';
import { FUNCTION_ID, startFakePlatform, type FakePlatform } from './helpers/platform-upstream.ts';
import { startProxy, type RunningProxy } from './helpers/proxy.ts';

const CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-headers': '*',
  'access-control-expose-headers': '*',
};

function assertCors(headers: Record<string, unknown>): void {
  for (const [name, value] of Object.entries(CORS)) assert.equal(headers[name], value, name);
}

function assertProblem(body: string, status: number, code: string): Record<string, unknown> {
  const problem = JSON.parse(body) as Record<string, unknown>;
  assert.equal(problem.status, status);
  assert.equal(problem.type, `urn:svc:problem-details:${code}`);
  assert.equal(typeof problem.title, 'string');
  assert.equal(typeof problem.detail, 'string');
  assert.match(String(problem.requestId), /^[0-9a-f-]{36}$/);
  assert.equal(typeof problem.instance, 'string');
  assert.doesNotMatch(String(problem.instance), /\?/, 'instance never carries the query (it may hold a token)');
  return problem;
}

describe('user authentication (jwt mode)', () => {
  let platform: FakePlatform;
  let identity: IdentityProvider;
  let running: RunningProxy;

  before(async () => {
    [platform, identity] = await Promise.all([startFakePlatform(), startIdentityProvider()]);
    running = await startProxy(platform, identity);
  });
  after(async () => {
    await running.close();
    await Promise.all([platform.close(), identity.close()]);
  });

  test('no token: 401 problem+json with CORS, nothing reaches the platform', async () => {
    const before = platform.upgrades.length;
    const refused = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`));
    assert.equal(refused.status, 401);
    assert.equal(refused.headers['content-type'], 'application/problem+json');
    assert.equal(refused.headers['www-authenticate'], 'Bearer');
    assertCors(refused.headers);
    assertProblem(refused.body, 401, 'unauthorized');
    assert.equal(platform.upgrades.length, before);
  });

  test('invalid tokens: bad signature, expired, wrong audience, wrong issuer, garbage → 401 with CORS', async () => {
    const tokens = [
      await identity.token({ svc_functions: [FUNCTION_ID] }, { key: 'untrusted' }),
      await identity.token({ svc_functions: [FUNCTION_ID] }, { expiresIn: Math.floor(Date.now() / 1000) - 120 }),
      await identity.token({ svc_functions: [FUNCTION_ID] }, { audience: 'someone-else' }),
      await identity.token({ svc_functions: [FUNCTION_ID] }, { issuer: 'https://evil.example' }),
      'not-a-jwt',
    ];
    for (const token of tokens) {
      const refused = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`, [`token.${token}`]));
      assert.equal(refused.status, 401);
      assertCors(refused.headers);
      assertProblem(refused.body, 401, 'unauthorized');
    }
    const expired = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in?access_token=${tokens[1]}`));
    assert.match(JSON.parse(expired.body).detail, /expired/);
  });

  test('a token for another function: 403 problem+json with CORS', async () => {
    const token = await identity.token({ svc_functions: ['0000-another-function'] });
    const refused = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`, [`token.${token}`]));
    assert.equal(refused.status, 403);
    assertCors(refused.headers);
    assertProblem(refused.body, 403, 'forbidden');

    const noClaim = await identity.token({});
    const refusedToo = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`, [`token.${noClaim}`]));
    assert.equal(refusedToo.status, 403);
  });

  test('a function-id item naming another function: 403', async () => {
    const token = await identity.token({ svc_functions: ['*'] });
    const refused = expectRefused(await openWebSocket(`${running.wsUrl}/sign_in`, [`token.${token}`, 'function-id.0000-another-function']));
    assert.equal(refused.status, 403);
    assertCors(refused.headers);
  });

  test('a granting token is accepted from each source: subprotocol item, cookie, query parameter', async () => {
    const token = await identity.token({ svc_functions: [FUNCTION_ID] });
    const wildcard = await identity.token({ svc_functions: '*' });
    // One after another, so the log lists them in this order.
    const attempts = [
      () => openWebSocket(`${running.wsUrl}/sign_in`, [`token.${token}`, 'svc-echo']),
      () => openWebSocket(`${running.wsUrl}/sign_in`, [], { headers: { cookie: `svc-user-token=${token}` } }),
      () => openWebSocket(`${running.wsUrl}/sign_in?access_token=${wildcard}`),
    ];
    for (const attempt of attempts) {
      const open = expectOpen(await attempt());
      assert.equal(open.first.type, 'session');
      open.ws.close();
      await closed(open.ws);
    }
    const accepted = running.logs.filter((line) => line.msg === 'tunnel open').map((line) => line.tokenSource);
    assert.deepEqual(accepted.slice(-3), ['subprotocol', 'cookie', 'query']);
  });

  test('plain HTTP requests need the token too; refusals carry CORS', async () => {
    const refused = await fetch(`${running.url}/v2/status`);
    assert.equal(refused.status, 401);
    assertCors(Object.fromEntries(refused.headers));
    assertProblem(await refused.text(), 401, 'unauthorized');

    const token = await identity.token({ svc_functions: [FUNCTION_ID] });
    const allowed = await fetch(`${running.url}/v2/status?access_token=${token}`);
    assert.equal(allowed.status, 200);
    assertCors(Object.fromEntries(allowed.headers));
  });

  test('neither the API key nor a user token ever reaches the log', async () => {
    const token = await identity.token({ svc_functions: [FUNCTION_ID] });
    const open = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in?access_token=${token}`));
    open.ws.close();
    await closed(open.ws);
    assert.ok(running.logText.length > 0);
    assert.ok(!running.logText.includes(platform.apiKey));
    assert.ok(!running.logText.includes(token));
    assert.ok(!running.logText.includes(token.split('.')[2]));
  });
});

describe('development mode without user auth', () => {
  test('connects without a token', async () => {
    const platform = await startFakePlatform();
    const running = await startProxy(platform, undefined);
    try {
      const open = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
      assert.equal(open.first.type, 'session');
      open.ws.close();
      await closed(open.ws);
    } finally {
      await running.close();
      await platform.close();
    }
  });
});
