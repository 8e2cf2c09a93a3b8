// Who streams, asked of the API replica that does not broker sessions: two `svc serve` processes on one
// PostgreSQL and NATS JetStream, the first running placement, the local cluster's agent and the reference
// streaming container. A session signed in on the first is listed by the second, which asks the first over
// NATS (streaming/sessions-relay.ts); another account is 404 there too; an ask not signed by a replica gets
// no answer.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createDatabase, postgresAvailable, type TestDatabase } from './helpers/databases.ts';
import { localSpec, streamingBody } from './helpers/fixtures.ts';
import { request } from './helpers/http.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { serveReplicaPair, type ServedPlatform } from './helpers/served.ts';
import { boundMs, until } from './helpers/wait.ts';

const hasFfmpeg = (() => {
  try {
    execFileSync('ffmpeg', ['-version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
const ready = (await postgresAvailable()) && natsServerAvailable();
if (!hasFfmpeg && !process.env.CI) console.log('# skipping streaming replica tests: install ffmpeg (Debian package ffmpeg)');

describe('streaming sessions listed by the replica that does not broker them', { skip: !ready || (!hasFfmpeg && !process.env.CI) }, () => {
  let database: TestDatabase;
  let nats: TestNats;
  let placement: ServedPlatform;
  let replica: ServedPlatform;
  let token: string;
  let apiKey: string;
  let fn: { id: string; versionId: string };
  const on = (served: ServedPlatform, method: string, target: string, options: { bearer?: string; body?: unknown; headers?: Record<string, string> } = {}) =>
    request(served.url, method, target, { host: 'api.localhost', bearer: options.bearer ?? token, body: options.body, headers: options.headers });
  const sessionsPath = () => `/v2/svc/functions/${fn.id}/versions/${fn.versionId}/sessions`;

  before(async () => {
    database = await createDatabase('postgres');
    nats = await startNats();
    ({ placement, replica } = await serveReplicaPair(database, nats.env, { SVC_AGENT_SANDBOX: 'off' }));
    ({ token, apiKey } = await placement.credentials(['invoke_function', 'list_functions']));
    fn = (await on(placement, 'POST', '/v2/svc/functions', {
      body: streamingBody({ name: 'replicated-stream', containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '320x180' }] }),
    })).body.function;
    const deployed = await on(placement, 'POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      body: { deploymentSpecifications: [localSpec({ minInstances: 1, maxInstances: 1, maxRequestConcurrency: 1 })] },
    });
    assert.equal(deployed.status, 200, deployed.text);
    await until('the stream to be ACTIVE', async () => (await on(placement, 'GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status === 'ACTIVE', boundMs(60_000));
  });

  after(async () => {
    await replica?.stop();
    await placement?.stop();
    await database?.drop();
    await nats?.stop();
  });

  test('a session granted by the placement replica is listed by the other, with its subject; another account 404', async () => {
    const signIn = (method: string, headers: Record<string, string>) =>
      on(placement, method, '/sign_in', { bearer: apiKey, headers: { 'x-svc-absorb': 'true', 'svc-function-id': fn.id, ...headers } });
    let granted = await signIn('POST', {});
    // The instance may still be confirming that it is ready: ask again with the session's id.
    for (let asked = 0; granted.status === 202 && asked < 20; asked++) granted = await signIn('POST', { 'svc-reqid': granted.body.sessionId });
    assert.equal(granted.status, 200, granted.text);

    const listed = await on(replica, 'GET', sessionsPath(), { bearer: apiKey });
    assert.equal(listed.status, 200, listed.text);
    assert.equal(listed.body.sessions.length, 1, listed.text);
    const [session] = listed.body.sessions;
    assert.equal(session.sessionId, granted.body.sessionId);
    assert.equal(session.state, 'GRANTED');
    assert.equal(session.versionId, fn.versionId);
    const whoami = await on(replica, 'GET', '/v2/svc/whoami', { bearer: apiKey });
    assert.deepEqual(session.subject, { kind: 'api-key', credentialId: whoami.body.credentialId, ownerId: whoami.body.ownerId });
    assert.ok(!listed.text.includes(apiKey), 'never the key itself');

    const admin = await placement.adminToken();
    assert.equal((await request(placement.url, 'POST', '/v2/svc/accounts/stream-replica-other', { host: 'api.localhost', bearer: admin, body: {} })).status, 200);
    const otherToken = (await request(placement.url, 'POST', '/v1/admin/keys', { host: 'api-keys.localhost', bearer: admin, body: { ncaId: 'stream-replica-other' } })).body.value;
    assert.equal((await on(replica, 'GET', sessionsPath(), { bearer: otherToken })).status, 404);

    assert.equal((await signIn('DELETE', { 'svc-reqid': granted.body.sessionId })).status, 200);
    assert.deepEqual((await on(replica, 'GET', sessionsPath(), { bearer: apiKey })).body, { sessions: [] });
  });

  test('an ask that no replica signed gets no answer', async () => {
    const intruder = await nats.connect();
    try {
      const ask = intruder.request('svc.sessions', JSON.stringify({ askId: randomUUID(), versionId: fn.versionId }), { timeout: 1000 });
      // A timeout, not "no responders": the placement replica hears it and ignores it.
      await assert.rejects(ask, /timeout/i);
      await until('the placement replica to say why', async () =>
        readFileSync(path.join(placement.dataDir, 'output.log'), 'utf8').includes('a sessions request not signed by a replica'));
    } finally {
      await intruder.close();
    }
  });
});
