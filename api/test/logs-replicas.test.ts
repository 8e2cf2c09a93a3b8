// Logs through the API replica that holds no agent link: two `svc serve` processes on one PostgreSQL and
// NATS JetStream, the first running placement and the local cluster's agent (test/talker as a real
// process). The second asks the first over NATS (control/logs/relay.ts): the kept lines, and a follow
// that shows a line the instance writes while it follows; another account is still 404 there. The second
// also shows the instances as placement stored them (it once showed them PENDING for good).
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { createDatabase, postgresAvailable, type TestDatabase } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { request } from './helpers/http.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { serveReplicaPair, type ServedPlatform } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

const ready = (await postgresAvailable()) && natsServerAvailable();
const SECRET = 'tok-9d8c7b6a-never-served';

describe('logs through the replica without agent links', { skip: !ready }, () => {
  let database: TestDatabase;
  let nats: TestNats;
  let placement: ServedPlatform;
  let replica: ServedPlatform;
  let token: string;
  let apiKey: string;
  let logsPath: string;
  let functionId: string;
  let versionPath: string;

  before(async () => {
    database = await createDatabase('postgres');
    nats = await startNats();
    ({ placement, replica } = await serveReplicaPair(database, nats.env, { SVC_AGENT_SANDBOX: 'off' }));
    ({ token, apiKey } = await placement.credentials(['invoke_function', 'list_functions']));
    const api = (method: string, target: string, body?: unknown) => request(placement.url, method, target, { host: 'api.localhost', bearer: token, body });
    const fn = (await api('POST', '/v2/svc/functions', {
      ...echoBody({ containerImage: 'test/talker:1', inferenceUrl: '/say', health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 } }),
      name: 'replicated-talker', secrets: [{ name: 'API_TOKEN', value: SECRET }],
    })).body.function;
    functionId = fn.id;
    versionPath = `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`;
    logsPath = `${versionPath}/logs`;
    await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1 }],
    });
    await until('the talker to be ACTIVE', async () => (await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status === 'ACTIVE', 60_000);
  });

  after(async () => {
    await replica?.stop();
    await placement?.stop();
    await database?.drop();
    await nats?.stop();
  });

  test('the kept lines and a live follow, asked of the placement replica over NATS; another account 404', async (t) => {
    const kept = await request(replica.url, 'GET', logsPath, { host: 'api.localhost', bearer: token });
    assert.equal(kept.status, 200, kept.text);
    assert.ok(kept.body.logs.some((line: { text: string }) => line.text === 'talker starting with token [redacted]'), kept.text);
    assert.ok(!kept.text.includes(SECRET));

    let events = '';
    const follower = http.get(new URL(`${logsPath}?follow=true`, replica.url), { headers: { host: 'api.localhost', authorization: `Bearer ${token}` } }, (response) => {
      assert.equal(response.statusCode, 200);
      response.setEncoding('utf8').on('data', (chunk: string) => { events += chunk; });
    });
    t.after(() => follower.destroy());
    await until('the follow to catch up', async () => events.includes('event: caught-up'));
    const marker = `marker-${process.pid}-${Date.now()}`;
    const invoked = await request(replica.url, 'POST', `/v2/svc/pexec/functions/${functionId}`, { host: 'api.localhost', bearer: apiKey, body: { say: marker } });
    assert.equal(invoked.status, 200, invoked.text);
    await until('the new line through the replica', async () => events.includes(`said: ${marker}`), 10_000);

    const other = await placement.adminToken();
    assert.equal((await request(placement.url, 'POST', '/v2/svc/accounts/logs-replica-other', { host: 'api.localhost', bearer: other, body: {} })).status, 200);
    const otherToken = (await request(placement.url, 'POST', '/v1/admin/keys', { host: 'api-keys.localhost', bearer: other, body: { ncaId: 'logs-replica-other' } })).body.value;
    assert.equal((await request(replica.url, 'GET', logsPath, { host: 'api.localhost', bearer: otherToken })).status, 404);
  });

  test("the instances as the placement replica stored them: RUNNING, with their restarts", async () => {
    const placed = (await request(placement.url, 'GET', versionPath, { host: 'api.localhost', bearer: token })).body.function.activeInstances;
    assert.equal(placed.length, 1);
    assert.equal(placed[0].instanceStatus, 'RUNNING');
    const shown = await until('the replica to show the instance RUNNING', async () => {
      const instances = (await request(replica.url, 'GET', versionPath, { host: 'api.localhost', bearer: token })).body.function.activeInstances;
      return instances[0]?.instanceStatus === 'RUNNING' && instances;
    }, 10_000);
    assert.deepEqual(shown.map((instance: any) => [instance.instanceId, instance.restartCount]), placed.map((instance: any) => [instance.instanceId, instance.restartCount]));
  });
});
