// The control-server contract of spec §4.6 over real HTTP on port 0: readiness, credentials, and
// problem+json errors that name the field at fault and never leak a stack trace or a secret.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { createControlServer, type Readiness } from '../src/control-server.ts';
import { CredentialStore, iceServersFor } from '../src/credentials.ts';
import { createLogger } from '../src/logger.ts';

const GOOD = { stunIp: '203.0.113.7', stunPort: 3478, username: '1767225600:session-1', password: 'c2VjcmV0LWhtYWM=' };

describe('control server', () => {
  let base = '';
  let readiness: Readiness = { ready: true };
  const credentials = new CredentialStore();
  const logLines: string[] = [];
  const log = createLogger('debug', new Writable({ write(chunk, _enc, done) { logLines.push(String(chunk)); done(); } }));
  const control = createControlServer({ readiness: () => readiness, credentials, log });

  before(async () => {
    const port = await control.listen(0, '127.0.0.1');
    base = `http://127.0.0.1:${port}`;
  });
  after(() => control.close());

  const postCreds = (body: string, contentType = 'application/json') =>
    fetch(`${base}/v1/streaming/creds`, { method: 'POST', headers: { 'content-type': contentType }, body });

  async function problem(response: Response): Promise<Record<string, unknown>> {
    assert.equal(response.headers.get('content-type'), 'application/problem+json');
    const body = await response.json() as Record<string, unknown>;
    for (const key of ['type', 'title', 'status', 'detail', 'instance']) assert.ok(key in body, `problem has ${key}`);
    assert.equal(body.status, response.status);
    assert.doesNotMatch(JSON.stringify(body), /at .*\.ts:\d+|Error:/, 'no stack trace');
    return body;
  }

  test('GET ready answers 200 while a session can start and 500 once it cannot', async () => {
    readiness = { ready: true };
    const ok = await fetch(`${base}/v1/streaming/ready`);
    assert.equal(ok.status, 200);
    assert.deepEqual(await ok.json(), { status: 'ready' });

    readiness = { ready: false, reason: 'session over; this container serves no more sessions' };
    const over = await fetch(`${base}/v1/streaming/ready`);
    assert.equal(over.status, 500);
    const body = await problem(over);
    assert.match(String(body.detail), /no more sessions/);
    assert.equal(body.instance, '/v1/streaming/ready');
    readiness = { ready: true };
  });

  test('POST creds with the §2.4 body is accepted and becomes the ICE servers of the next session', async () => {
    const response = await postCreds(JSON.stringify(GOOD));
    assert.equal(response.status, 200);
    assert.deepEqual(credentials.current, GOOD);
    assert.deepEqual(iceServersFor(credentials.current), [
      { urls: 'stun:203.0.113.7:3478' },
      { urls: 'turn:203.0.113.7:3478?transport=udp', username: GOOD.username, credential: GOOD.password },
    ]);
    // The password was logged nowhere.
    assert.ok(logLines.some((l) => l.includes('credentials received')));
    assert.ok(!logLines.some((l) => l.includes(GOOD.password)), 'password absent from logs');
  });

  test('a newer POST replaces the cached credentials', async () => {
    const next = { ...GOOD, username: '1767229200:session-2', password: 'bmV4dA==' };
    assert.equal((await postCreds(JSON.stringify(next))).status, 200);
    assert.equal(credentials.current?.username, next.username);
  });

  test('an IPv6 STUN address is bracketed in the ICE URLs', () => {
    assert.deepEqual(iceServersFor({ ...GOOD, stunIp: '2001:db8::1' }).map((s) => s.urls), ['stun:[2001:db8::1]:3478', 'turn:[2001:db8::1]:3478?transport=udp']);
  });

  test('no credentials means no ICE servers at all (never a public default)', () => {
    assert.deepEqual(iceServersFor(undefined), []);
  });

  const badBodies: [string, Record<string, unknown> | string, string][] = [
    ['missing stunIp', { stunPort: 3478, username: 'u', password: 'p' }, 'stunIp'],
    ['stunIp not an address', { ...GOOD, stunIp: 'turn.example.com' }, 'stunIp'],
    ['stunPort as a string', { ...GOOD, stunPort: '3478' }, 'stunPort'],
    ['stunPort out of range', { ...GOOD, stunPort: 70000 }, 'stunPort'],
    ['stunPort not an integer', { ...GOOD, stunPort: 3478.5 }, 'stunPort'],
    ['empty username', { ...GOOD, username: '' }, 'username'],
    ['password missing', { stunIp: GOOD.stunIp, stunPort: GOOD.stunPort, username: 'u' }, 'password'],
    ['unknown field', { ...GOOD, realm: 'x' }, 'realm'],
    ['not an object', '[1,2]', '(body)'],
    ['not JSON', '{"stunIp":', '(body)'],
  ];
  for (const [name, body, field] of badBodies) {
    test(`bad creds (${name}) → 400 naming ${field}`, async () => {
      const before = credentials.current;
      const response = await postCreds(typeof body === 'string' ? body : JSON.stringify(body));
      assert.equal(response.status, 400);
      const problemBody = await problem(response);
      assert.equal(problemBody.field, field);
      if (field !== '(body)') assert.match(String(problemBody.detail), new RegExp(field));
      assert.equal(credentials.current, before, 'cached credentials unchanged');
    });
  }

  test('creds without a JSON content type → 415', async () => {
    const response = await postCreds(JSON.stringify(GOOD), 'text/plain');
    assert.equal(response.status, 415);
    assert.equal((await problem(response)).field, 'Content-Type');
  });

  test('an oversized body → 413', async () => {
    const response = await postCreds(JSON.stringify({ ...GOOD, username: 'x'.repeat(20_000) }));
    assert.equal(response.status, 413);
    await problem(response);
  });

  test('wrong method → 405 with Allow; unknown path → 404', async () => {
    const wrong = await fetch(`${base}/v1/streaming/creds`);
    assert.equal(wrong.status, 405);
    assert.equal(wrong.headers.get('allow'), 'POST');
    await problem(wrong);
    const missing = await fetch(`${base}/v1/streaming/nothing`);
    assert.equal(missing.status, 404);
    await problem(missing);
  });
});
