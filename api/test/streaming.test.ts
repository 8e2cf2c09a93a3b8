// Streaming sessions through the gateway (spec 4.6, 4.7; wire-reference 9), against the real reference
// streaming container run by the in-process agent: refusals before the upgrade, the session cookie,
// resume after an abrupt drop, the reference's sign-in as its portal sends it, the line when every
// instance is busy, the wait it estimates, and instances that go back to the line at once (a silent
// socket, an untaken grant).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { WebSocket } from 'ws';
import { echoBody, streamingBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { request, type TestResponse } from './helpers/http.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { boundMs, until } from './helpers/wait.ts';

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

function open(svc: TestPlatform, headers: Record<string, string>, protocols?: string[], query = 'app=test'): Promise<Opened> {
  const url = new URL(svc.url);
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${url.port}/sign_in?${query}`, protocols, { headers: { host: `api.localhost:${url.port}`, ...headers } });
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
      response.on('end', () => reject(Object.assign(new Error(`refused ${response.statusCode}: ${body}`), { status: response.statusCode, headers: response.headers, body: body ? JSON.parse(body) : undefined })));
    });
    ws.once('error', reject);
  });
}

const closed = (ws: WebSocket) => new Promise<number>((resolve) => ws.once('close', resolve));

describe('streaming sessions through the gateway', { skip: !hasFfmpeg && !process.env.CI ? 'ffmpeg missing' : false }, () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let fn: Deployed;
  const headers = () => ({ authorization: `Bearer ${key}`, 'svc-function-id': fn.id });
  const signIn = (method: string, given: Record<string, string>) =>
    request(svc.url, method, '/sign_in?app=test', { host: 'api.localhost', headers: { 'x-svc-absorb': 'true', ...given } });
  const instanceNow = async () => (await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: key })).body.function.activeInstances[0]?.instanceId;
  /** Asks again with svc-reqid until granted; each answer is a 202 with the place in line until then. */
  async function waitInLine(first: TestResponse, boundMs: number): Promise<TestResponse> {
    const deadline = Date.now() + boundMs;
    let answer = first;
    while (answer.status === 202) {
      assert.ok(Date.now() < deadline, `still waiting in line: ${answer.text}`);
      assert.equal(answer.body.status, 'WAITING');
      answer = await signIn('POST', { ...headers(), 'svc-reqid': answer.body.sessionId });
    }
    return answer;
  }

  before(async () => {
    svc = await startTestPlatform({ config: { streaming: { resumeWindowSeconds: 30, busyResumeWindowSeconds: 2, answerWithinSeconds: 1, grantSeconds: 2 } } });
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

  test('a session: cookie and svc-reqid on the 101, a place in line for the next, resume after a drop, a fresh instance after bye', async () => {
    const first = await open(svc, headers());
    assert.match(String(first.cookie), /^svc-request-id=[0-9a-f-]{36}; Path=\/; HttpOnly/);
    assert.equal(first.cookie?.split(';')[0].split('=')[1], first.reqId);
    first.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    const config = await first.next('config');
    assert.equal(config.resumed, false);
    const instanceBefore = await instanceNow();

    const second = await open(svc, headers()).then(() => undefined, (error) => error);
    assert.equal(second?.status, 503, 'the only instance is in a session: a place in line, not a wall');
    assert.equal(second.headers['retry-after'], '1');
    assert.match(second.body.detail, /#1 in line/);

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
    await waitFor(svc, key, fn, (record) => running(record) && record.activeInstances.every((instance: any) => instance.instanceId !== instanceBefore), 60_000);
    const gone = await open(svc, { ...headers(), cookie: first.cookie!.split(';')[0] }).then(() => undefined, (error) => error);
    assert.equal(gone?.status, 404, 'the ended session cannot be resumed');
  });

  test('the reference portal\'s sign-in: POST with X-SVC-ABSORB reserves, the WebSocket with the cookie takes it, DELETE answers 200 and ends it', async () => {
    // As the reference portal sends them (renamed): Authorization, Function-ID, Function-Version-ID, X-SVC-ABSORB.
    const portal = { Authorization: `Bearer ${key}`, 'Function-ID': fn.id, 'Function-Version-ID': fn.versionId };
    const reserved = await signIn('POST', { ...portal, cookie: 'svc-request-id=stale-and-replaced' });
    assert.equal(reserved.status, 200);
    const cookie = String(reserved.headers['set-cookie']).split(';')[0];
    assert.match(cookie, /^svc-request-id=[0-9a-f-]{36}$/, 'what the portal reads: the svc-request-id cookie');
    assert.equal(reserved.headers['svc-reqid'], cookie.split('=')[1]);
    const session = await open(svc, { ...portal, cookie });
    assert.equal(session.reqId, cookie.split('=')[1]);
    session.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    assert.equal((await session.next('config')).resumed, false, 'the first connection of a reservation is a new session');
    const instanceBefore = await instanceNow();
    const ended = await request(svc.url, 'DELETE', '/sign_in', { host: 'api.localhost', headers: { ...portal, cookie, 'X-SVC-ABSORB': 'true' } });
    assert.equal(ended.status, 200, 'the portal closes its socket only on 200');
    assert.match(String(ended.headers['set-cookie']), /^svc-request-id=; Path=\/; Max-Age=0/);
    await closed(session.ws);
    const again = await request(svc.url, 'DELETE', '/sign_in', { host: 'api.localhost', headers: { ...portal, cookie, 'X-SVC-ABSORB': 'true' } });
    assert.equal(again.status, 404, 'an ended session is gone');
    const refused = await signIn('POST', { 'svc-function-id': fn.id });
    assert.equal(refused.status, 401);
    await waitFor(svc, key, fn, (record) => running(record) && record.activeInstances.length === 1 && record.activeInstances[0].instanceId !== instanceBefore, 60_000);
    // The spelling this platform answered before: SVC-ABSORB without the X-.
    const older = await request(svc.url, 'POST', '/sign_in', { host: 'api.localhost', headers: { ...portal, 'svc-absorb': 'true' } });
    assert.equal(older.status, 200);
    const left = await request(svc.url, 'DELETE', '/sign_in', { host: 'api.localhost', headers: { ...portal, 'svc-absorb': 'true', 'svc-reqid': older.body.sessionId } });
    assert.equal(left.status, 200);
  });

  test('a line, not a wall: when the instance is busy, sign-ins wait in order with their place, and the first in line gets the next instance', async () => {
    const holder = await signIn('POST', headers());
    assert.equal(holder.status, 200);
    const live = await open(svc, headers(), undefined, `svc-reqid=${holder.body.sessionId}`);
    live.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    await live.next('config');

    const b = await signIn('POST', headers());
    const c = await signIn('POST', headers());
    assert.equal(b.status, 202);
    assert.deepEqual([b.body.status, b.body.position, c.body.position], ['WAITING', 1, 2]);
    assert.equal(b.headers['svc-reqid'], b.body.sessionId);
    assert.equal(b.headers['set-cookie'], undefined, 'no cookie until an instance is granted: tabs of one browser share cookies');
    const stillB = await signIn('POST', { ...headers(), 'svc-reqid': b.body.sessionId });
    assert.equal(stillB.body.position, 1, 'asking again keeps the place');
    const busy = await signIn('POST', { ...headers(), 'svc-reqid': holder.body.sessionId });
    assert.equal(busy.status, 409, 'a connected session is not a place in line');

    assert.equal((await signIn('DELETE', { ...headers(), 'svc-reqid': holder.body.sessionId })).status, 200);
    await closed(live.ws);
    const granted = await waitInLine(stillB, 30_000);
    assert.equal(granted.status, 200);
    assert.equal(granted.body.sessionId, b.body.sessionId, 'the first in line is served first');
    const session = await open(svc, headers(), undefined, `svc-reqid=${b.body.sessionId}`);
    session.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    await session.next('config');
    const cNow = await signIn('POST', { ...headers(), 'svc-reqid': c.body.sessionId });
    assert.equal(cNow.body.position, 1);
    assert.equal((await signIn('DELETE', { ...headers(), 'svc-reqid': c.body.sessionId })).status, 200, 'leaving the line');
    session.ws.send(JSON.stringify({ type: 'bye' }));
    await session.next('bye');
  });

  test('the owner lists who streams and who waits: the subject, since when, the line; other accounts get 404, other scopes 403', async () => {
    const sessionsPath = `/v2/svc/functions/${fn.id}/versions/${fn.versionId}/sessions`;
    const listed = async (bearer = key) => {
      const answer = await svc.api('GET', sessionsPath, { bearer });
      assert.equal(answer.status, 200, answer.text);
      return answer.body.sessions as any[];
    };
    const credentialOf = async (bearer: string) => (await svc.api('GET', '/v2/svc/whoami', { bearer })).body.credentialId;
    const second = await svc.apiKey(token, ['invoke_function']);
    const secondHeaders = { authorization: `Bearer ${second}`, 'svc-function-id': fn.id };

    const holder = await waitInLine(await signIn('POST', headers()), 60_000);
    assert.equal(holder.status, 200);
    const [granted] = await listed();
    assert.equal(granted.state, 'GRANTED');
    assert.deepEqual(granted.subject, { kind: 'api-key', credentialId: await credentialOf(key), ownerId: granted.subject.ownerId });
    assert.equal(granted.instanceId, await instanceNow());
    assert.equal(granted.versionId, fn.versionId);
    const live = await open(svc, headers(), undefined, `svc-reqid=${holder.body.sessionId}`);
    live.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    await live.next('config');
    const b = await signIn('POST', headers());
    const c = await signIn('POST', secondHeaders);
    assert.deepEqual([b.status, c.status], [202, 202]);

    const sessions = await listed();
    assert.deepEqual(sessions.map((session) => [session.sessionId, session.state, session.position]),
      [[holder.body.sessionId, 'STREAMING', undefined], [b.body.sessionId, 'WAITING', 1], [c.body.sessionId, 'WAITING', 2]]);
    assert.ok(Date.parse(sessions[0].connectedAt) >= Date.parse(sessions[0].grantedAt) && Date.parse(sessions[0].grantedAt) >= Date.parse(sessions[0].joinedAt));
    assert.equal(sessions[2].subject.credentialId, await credentialOf(second), 'each session names the credential that started it');
    assert.equal(sessions[2].instanceId, undefined, 'waiting: no instance yet');
    const text = JSON.stringify(sessions);
    assert.ok(!text.includes(key) && !text.includes(second), 'never a secret');

    // Owner account only, with the scopes that read the function.
    await svc.api('POST', '/v2/svc/accounts/stream-other', { bearer: await svc.adminToken(), body: {} });
    const stranger = await svc.apiKey(await svc.token({ ncaId: 'stream-other' }), ['list_functions']);
    assert.equal((await svc.api('GET', sessionsPath, { bearer: stranger })).status, 404);
    assert.equal((await svc.api('GET', sessionsPath, { bearer: second })).status, 403, 'invoke_function alone does not read the function');
    const bad = await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/not-a-version/sessions`, { bearer: key });
    assert.equal(bad.status, 400);
    assert.match(bad.body.detail, /functionVersionId/);
    const echo = await svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name: 'not-streaming' }) });
    const none = await svc.api('GET', `/v2/svc/functions/${echo.body.function.id}/versions/${echo.body.function.versionId}/sessions`, { bearer: key });
    assert.deepEqual(none.body, { sessions: [] }, 'a function that does not stream has no sessions');

    // The browser drops: the session keeps its instance for the resume window, and says until when.
    live.ws.terminate();
    let resuming: any;
    await until('the dropped session to read RESUMING', async () => (resuming = (await listed())[0]).state === 'RESUMING', boundMs(10_000));
    assert.ok(Date.parse(resuming.resumeBy) > Date.parse(resuming.connectedAt));
    for (const sessionId of [b.body.sessionId, c.body.sessionId]) assert.equal((await signIn('DELETE', { ...headers(), 'svc-reqid': sessionId })).status, 200);
    assert.equal((await signIn('DELETE', { ...headers(), 'svc-reqid': holder.body.sessionId })).status, 200);
    assert.deepEqual(await listed(), []);
  });

  test('a browser that quits without a bye while someone waits holds its instance for the short resume window, not the full one', async () => {
    const holder = await waitInLine(await signIn('POST', headers()), 60_000);
    assert.equal(holder.status, 200);
    const live = await open(svc, headers(), undefined, `svc-reqid=${holder.body.sessionId}`);
    live.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    await live.next('config');
    const instance = await instanceNow();
    const next = await signIn('POST', headers());
    assert.equal(next.status, 202);
    // The whole browser quits: no pagehide, no bye, the socket just goes.
    live.ws.terminate();
    // The full window is 30 s; with someone in line the instance is retired after 2 s and a fresh one serves them.
    const granted = await waitInLine(next, 25_000);
    assert.equal(granted.status, 200);
    assert.equal(granted.body.sessionId, next.body.sessionId);
    assert.notEqual(await instanceNow(), instance, 'the dropped session\'s container was retired (one session per container)');
    const gone = await open(svc, { ...headers(), cookie: `svc-request-id=${holder.body.sessionId}` }).then(() => undefined, (error) => error);
    assert.equal(gone?.status, 404, 'the dropped session is over');
    await signIn('DELETE', { ...headers(), 'svc-reqid': granted.body.sessionId });
  });

  test('a WebSocket that never says hello, and a grant nobody takes, give the same instance to the next in line at once', async () => {
    const silent = await waitInLine(await signIn('POST', headers()), 30_000);
    assert.equal(silent.status, 200);
    const instance = await instanceNow();
    const socket = await open(svc, headers(), undefined, `svc-reqid=${silent.body.sessionId}`);
    const next = await signIn('POST', headers());
    assert.equal(next.status, 202);
    // The container closes a connection that says nothing within 3 s; the broker finds it ready again.
    assert.equal(await closed(socket.ws), 4400);
    const granted = await waitInLine(next, boundMs(5000));
    assert.equal(granted.body.sessionId, next.body.sessionId);
    assert.equal(await instanceNow(), instance, 'not replaced: its container never started a session');

    // This grant is never taken (grantSeconds 2): the instance goes to the next in line.
    const third = await waitInLine(await signIn('POST', headers()), boundMs(5000));
    assert.equal(third.status, 200);
    assert.equal(await instanceNow(), instance);
    await signIn('DELETE', { ...headers(), 'svc-reqid': third.body.sessionId });
  });

  test('the estimate shown in line: none before a session of the function has ended, then the places ahead times the mean session', async () => {
    // A function of its own: the mean session length is learnt per function, and the other tests end sessions too.
    const other = await deploy(svc, token, streamingBody({
      name: 'stream-estimate', containerImage: 'local/streaming-app:1',
      containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '320x180' }, { key: 'STREAMING_VIDEO_FPS', value: '30' }],
    }), { maxRequestConcurrency: 1 });
    await waitFor(svc, key, other, running, 60_000);
    const to = { authorization: `Bearer ${key}`, 'svc-function-id': other.id };
    const hello = async (sessionId: string) => {
      const session = await open(svc, to, undefined, `svc-reqid=${sessionId}`);
      session.ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
      await session.next('config');
      return session;
    };

    const askedAt = performance.now();
    const a = await waitInLine(await signIn('POST', to), 30_000);
    const grantedBy = performance.now();
    await hello(a.body.sessionId);
    const b = await signIn('POST', to);
    assert.equal(b.body.position, 1);
    assert.equal(b.body.estimatedWaitSeconds, undefined, 'no session of this function has ended yet: no estimate');
    await sleep(1500);
    // A's session lasted from its grant (between askedAt and grantedBy) to its sign-out (between endingAt and endedBy).
    const endingAt = performance.now();
    assert.equal((await signIn('DELETE', { ...to, 'svc-reqid': a.body.sessionId })).status, 200);
    const endedBy = performance.now();

    const granted = await waitInLine(await signIn('POST', { ...to, 'svc-reqid': b.body.sessionId }), 30_000);
    const session = await hello(granted.body.sessionId);
    const c = await signIn('POST', to);
    const d = await signIn('POST', to);
    assert.deepEqual([c.body.position, d.body.position], [1, 2]);
    // One instance: the first in line waits one mean session (only A's so far), the second two.
    const [shortest, longest] = [(endingAt - grantedBy) / 1000, (endedBy - askedAt) / 1000];
    for (const [answer, ahead] of [[c, 1], [d, 2]] as const) {
      const estimate = answer.body.estimatedWaitSeconds;
      assert.ok(estimate >= Math.ceil(ahead * shortest) && estimate <= Math.ceil(ahead * longest),
        `#${ahead}: ${estimate} s, for a session of ${shortest.toFixed(2)}-${longest.toFixed(2)} s`);
    }
    for (const waiting of [c, d]) assert.equal((await signIn('DELETE', { ...to, 'svc-reqid': waiting.body.sessionId })).status, 200);
    session.ws.send(JSON.stringify({ type: 'bye' }));
    await session.next('bye');
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
