// What the platform receives from the proxy, exactly: its credential and function headers added, the
// browser's credential items gone, everything else passed on.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { closed, expectOpen, openWebSocket, roundTrip } from './helpers/browser.ts';
import { startIdentityProvider, type IdentityProvider } from './helpers/identity.ts';
import { FUNCTION_ID, FUNCTION_VERSION_ID, startFakePlatform, type FakePlatform } from './helpers/platform-upstream.ts';
import { startProxy, type RunningProxy } from './helpers/proxy.ts';

describe('forwarding to the platform', () => {
  let platform: FakePlatform;
  let identity: IdentityProvider;
  let running: RunningProxy;
  let token: string;

  before(async () => {
    [platform, identity] = await Promise.all([startFakePlatform(), startIdentityProvider()]);
    running = await startProxy(platform, identity, { STREAMING_FUNCTION_VERSION_ID: FUNCTION_VERSION_ID });
    token = await identity.token({ svc_functions: [FUNCTION_ID] });
  });
  after(async () => {
    await running.close();
    await Promise.all([platform.close(), identity.close()]);
  });

  test('the upgrade carries Host, bearer key, function and version; the browser\'s credentials are removed', async () => {
    const handshake = expectOpen(await openWebSocket(
      `${running.wsUrl}/sign_in?width=1280&access_token=${token}&height=720`,
      [`token.${token}`, 'authorization.svcapikey-from-the-browser', `function-id.${FUNCTION_ID}`, 'svc-echo'],
      { headers: { cookie: `theme=dark; svc-user-token=${token}`, authorization: 'Bearer browser-made-this-up', 'svc-function-version-id': 'browser-choice' } },
    ));
    const received = platform.upgrades.at(-1);
    assert.ok(received);
    assert.equal(received.headers.host, platform.host);
    assert.equal(received.headers.authorization, `Bearer ${platform.apiKey}`);
    assert.equal(received.headers['svc-function-id'], FUNCTION_ID);
    assert.equal(received.headers['svc-function-version-id'], FUNCTION_VERSION_ID);
    assert.equal(received.headers['sec-websocket-protocol'], 'svc-echo', 'only the application\'s own subprotocol is forwarded');
    assert.equal(received.url, '/sign_in?width=1280&height=720', 'path and query pass on, minus the token parameter');
    assert.equal(received.headers.cookie, 'theme=dark');
    assert.equal(handshake.first.type, 'session');
    handshake.ws.close();
    await closed(handshake.ws);
  });

  test('browser cookies other than the user token are forwarded; the token cookie is not', async () => {
    const handshake = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`, [], { headers: { cookie: `theme=dark; svc-user-token=${token}; lang=en` } }));
    const received = platform.upgrades.at(-1);
    assert.equal(received?.headers.cookie, 'theme=dark; lang=en');
    handshake.ws.close();
    await closed(handshake.ws);
  });

  test('the token never comes back as the selected subprotocol; the platform\'s choice stands', async () => {
    const withAppProtocol = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`, [`token.${token}`, 'svc-echo']));
    assert.equal(withAppProtocol.headers['sec-websocket-protocol'], 'svc-echo');
    assert.equal(withAppProtocol.ws.protocol, 'svc-echo');
    withAppProtocol.ws.close();

    // Only platform-layer items offered: the platform selects nothing, the proxy answers with the
    // function-id item (Chrome fails a handshake that offered protocols and got none back).
    const routingOnly = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`, [`token.${token}`, `function-id.${FUNCTION_ID}`]));
    assert.equal(routingOnly.headers['sec-websocket-protocol'], `function-id.${FUNCTION_ID}`);
    assert.equal(platform.upgrades.at(-1)?.headers['sec-websocket-protocol'], undefined);
    routingOnly.ws.close();
    await Promise.all([closed(withAppProtocol.ws), closed(routingOnly.ws)]);
  });

  test('frames pass both ways unchanged, text and binary, small and large', async () => {
    const handshake = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`, [`token.${token}`, `function-id.${FUNCTION_ID}`]));
    const { ws } = handshake;
    assert.equal(await roundTrip(ws, 'hello'), 'hello');
    const large = 'x'.repeat(200_000);
    assert.equal(await roundTrip(ws, large), large);
    const binary = Buffer.from(Array.from({ length: 70_000 }, (_, index) => index % 251));
    ws.send(binary);
    const echoed = await new Promise<Buffer>((resolve) => ws.once('message', (data) => resolve(data as Buffer)));
    assert.ok(echoed.equals(binary));
    ws.close();
    await closed(ws);
  });

  test('plain HTTP requests are forwarded with the same headers, and their responses get CORS', async () => {
    // An Authorization header is not a token source (it would be ambiguous with a platform key).
    const response = await fetch(`${running.url}/v2/ping?a=1`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(response.status, 401);
    const ok = await fetch(`${running.url}/v2/ping?a=1`, { headers: { cookie: `svc-user-token=${token}` } });
    assert.equal(ok.status, 200);
    const echoed = await ok.json() as { url: string; headers: Record<string, string> };
    assert.equal(echoed.url, '/v2/ping?a=1');
    assert.equal(echoed.headers.host, platform.host);
    assert.equal(echoed.headers.authorization, `Bearer ${platform.apiKey}`);
    assert.equal(echoed.headers['svc-function-id'], FUNCTION_ID);
    assert.equal(echoed.headers.cookie, undefined);
    assert.equal(ok.headers.get('access-control-allow-origin'), '*');
    assert.equal(ok.headers.get('access-control-expose-headers'), '*');
    assert.equal(ok.headers.get('access-control-allow-headers'), '*');
  });
});
