// Streaming sessions through the gateway (spec 4.6, 4.7; wire-reference 9), against the real reference
// streaming container run by the in-process agent: refusals before the upgrade, the session cookie,
// one session per instance, resume after an abrupt drop, unknown sessions, TURN credentials pushed to
// the container, and a fresh instance after the container exits.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { WebSocket } from 'ws';
import { streamingBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { request } from './helpers/http.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

const hasFfmpeg = (() => {
  try {
    execFileSync('ffmpeg', ['-version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
if (!hasFfmpeg && !process.env.CI) console.log('# skipping streaming session tests: install ffmpeg (Debian package ffmpeg)');

interface Opened {
  ws: WebSocket;
  cookie?: string;
  reqId?: string;
  messages: any[];
  next(type: string): Promise<any>;
}

function open(svc: TestPlatform, headers: Record<string, string>, protocols?: string[]): Promise<Opened> {
  const url = new URL(svc.url);
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${url.port}/sign_in?app=test`, protocols, { headers: { host: `api.localhost:${url.port}`, ...headers } });
    const messages: any[] = [];
    const waiters: { type: string; resolve: (message: any) => void }[] = [];
    ws.on('message', (data) => {
      const message = JSON.parse(data.toString());
      messages.push(message);
      const index = waiters.findIndex((waiter) => waiter.type === message.type);
      if (index >= 0) waiters.splice(index, 1)[0].resolve(message);
    });
    ws.once('upgrade', (response) => {
      const cookie = (response.headers['set-cookie'] ?? [])[0];
      resolve({
        ws, cookie, reqId: response.headers['svc-reqid'] as string | undefined, messages,
        next: (type) => {
          const seen = messages.find((message) => message.type === type);
          return seen ? Promise.resolve(seen) : new Promise((done) => waiters.push({ type, resolve: done }));
        },
      });
    });
    ws.once('unexpected-response', (_req, response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => { body += chunk; });
      response.on('end', () => reject(Object.assign(new Error(`refused ${response.statusCode}`), { status: response.statusCode, headers: response.headers, body: body ? JSON.parse(body) : undefined })));
    });
    ws.once('error', reject);
  });
}

describe('streaming sessions through the gateway', { skip: !hasFfmpeg && !process.env.CI ? 'ffmpeg missing' : false }, () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let fn: Deployed;
  const headers = () => ({ authorization: `Bearer ${key}`, 'svc-function-id': fn.id });

  before(async () => {
    svc = await startTestPlatform({ config: { streaming: { resumeWindowSeconds: 30, waitForInstanceSeconds: 1 } } });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    fn = await deploy(svc, token, streamingBody({
      name: 'stream-e2e', containerImage: 'local/streaming-app:1',
      containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '320x180' }, { key: 'STREAMING_VIDEO_FPS', value: '30' }],
    }), { maxRequestConcurrency: 1 });
    await waitFor(svc, key, fn, running, 60_000);
  });
  after(() => svc.close());

  test('refusals come before the upgrade as problem+json', async () => {
    const cases: [Record<string, string>, number][] = [
      [{ 'svc-function-id': fn.id }, 401],
      [{ authorization: `Bearer ${await svc.apiKey(token, ['list_functions'])}`, 'svc-function-id': fn.id }, 403],
      [{ authorization: `Bearer ${key}` }, 400],
      [{ authorization: `Bearer ${key}`, 'svc-function-id': '00000000-0000-4000-8000-000000000000' }, 404],
      [{ authorization: `Bearer ${key}`, cookie: 'svc-request-id=00000000-0000-4000-8000-000000000000' }, 404],
    ];
    for (const [given, status] of cases) {
      const refusal = await open(svc, given).then(() => undefined, (error) => error);
      assert.equal(refusal?.status, status, JSON.stringify(given));
      assert.equal(refusal.headers['content-type'], 'application/problem+json; charset=utf-8');
      assert.equal(refusal.body.status, status);
    }
    const unknown = await open(svc, { authorization: `Bearer ${key}`, cookie: 'svc-request-id=nope' }).then(() => undefined, (error) => error);
    assert.match(unknown.headers['set-cookie'][0], /^svc-request-id=; Path=\/; Max-Age=0/, 'an unknown session clears the cookie');
  });

  test('a session: cookie and svc-reqid on the 101, one session per instance, resume after a drop, a fresh instance after bye', async () => {
    const first = await open(svc, headers());
    assert.match(String(first.cookie), /^svc-request-id=[0-9a-f-]{36}; Path=\/; HttpOnly/);
    assert.equal(first.cookie?.split(';')[0].split('=')[1], first.reqId);
    first.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    const config = await first.next('config');
    assert.equal(config.resumed, false);
    const instanceBefore = (await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: key })).body.function.activeInstances[0].instanceId;

    const second = await open(svc, headers()).then(() => undefined, (error) => error);
    assert.equal(second?.status, 503, 'the only instance is in a session');
    assert.equal(second.headers['retry-after'], '5');

    first.ws.terminate();
    await sleep(200);
    const resumed = await open(svc, { ...headers(), cookie: first.cookie!.split(';')[0] });
    assert.equal(resumed.reqId, first.reqId, 'the same session');
    resumed.ws.send(JSON.stringify({ type: 'hello', protocol: 1, resumeToken: config.resumeToken, hasPeer: false }));
    const again = await resumed.next('config');
    assert.equal(again.resumed, true, 'the same container took it back');
    assert.equal(again.sessionId, config.sessionId);

    resumed.ws.send(JSON.stringify({ type: 'bye' }));
    await resumed.next('bye');
    const fresh = await waitFor(svc, key, fn, (record) => running(record) && record.activeInstances.some((instance: any) => instance.instanceId !== instanceBefore && instance.instanceStatus === 'RUNNING'), 60_000);
    assert.ok(fresh.activeInstances.every((instance: any) => instance.instanceId !== instanceBefore), 'the container exited and was replaced');
    const gone = await open(svc, { ...headers(), cookie: first.cookie!.split(';')[0] }).then(() => undefined, (error) => error);
    assert.equal(gone?.status, 404, 'the ended session cannot be resumed');
  });

  test('the reference sign-in: POST with SVC-ABSORB reserves a session and its cookie, the WebSocket takes it, DELETE ends it', async () => {
    // Sign-in lives on any path outside the REST API (and /v3/openapi): plain requests.
    const signIn = (method: string, given: Record<string, string>) => request(svc.url, method, '/sign_in?app=test', { host: 'api.localhost', headers: { 'svc-absorb': 'true', ...given } });
    const reserved = await signIn('POST', { ...headers(), cookie: 'svc-request-id=stale-and-replaced' });
    assert.equal(reserved.status, 200);
    const cookie = String(reserved.headers['set-cookie']).split(';')[0];
    assert.equal(cookie, `svc-request-id=${reserved.body.sessionId}`);
    assert.equal(reserved.headers['svc-reqid'], reserved.body.sessionId);
    const session = await open(svc, { authorization: `Bearer ${key}`, cookie });
    assert.equal(session.reqId, reserved.body.sessionId);
    session.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    assert.equal((await session.next('config')).resumed, false, 'the first connection of a reservation is a new session');
    const instanceBefore = (await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: key })).body.function.activeInstances[0].instanceId;
    const ended = await signIn('DELETE', { authorization: `Bearer ${key}`, cookie });
    assert.equal(ended.status, 204);
    assert.match(String(ended.headers['set-cookie']), /Max-Age=0/);
    await new Promise((resolve) => session.ws.once('close', resolve));
    const refused = await signIn('POST', { 'svc-function-id': fn.id });
    assert.equal(refused.status, 401);
    await waitFor(svc, key, fn, (record) => running(record) && record.activeInstances.length === 1 && record.activeInstances[0].instanceId !== instanceBefore, 60_000);
  });

  test('browsers may carry the key and function in Sec-WebSocket-Protocol; the function item is chosen, the key never echoed', async () => {
    const session = await open(svc, { }, [`authorization.${key}`, `function-id.${fn.id}`]);
    assert.equal(session.ws.protocol, `function-id.${fn.id}`);
    session.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    await session.next('config');
    session.ws.send(JSON.stringify({ type: 'bye' }));
    await session.next('bye');
  });
});
