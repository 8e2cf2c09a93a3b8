// A graceful undeploy with several API replicas: the DELETE reaches a replica that does not run placement
// (behind a load balancer, most do), while a request that replica sent runs on the version's instance.
// The request still ends 200 with the instance's answer, and the instance stops once it has.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createDatabase, postgresAvailable, tempDir, type TestDatabase } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { request } from './helpers/http.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { serveReplicaPair, type ServedPlatform } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

const ready = (await postgresAvailable()) && natsServerAvailable();

describe('a graceful undeploy through a replica that does not run placement', { skip: !ready }, () => {
  let database: TestDatabase;
  let nats: TestNats;
  let placement: ServedPlatform;
  let replica: ServedPlatform;
  let token: string;
  let apiKey: string;
  const counterFile = path.join(tempDir(), 'requests.log');

  before(async () => {
    database = await createDatabase('postgres');
    nats = await startNats();
    ({ placement, replica } = await serveReplicaPair(database, nats.env));
    ({ token, apiKey } = await placement.credentials(['invoke_function', 'list_functions']));
  });

  after(async () => {
    await replica?.stop();
    await placement?.stop();
    await database?.drop();
    await nats?.stop();
  });

  const api = (url: string, method: string, route: string, body?: unknown) => request(url, method, route, { host: 'api.localhost', bearer: token, body });

  test('lets the request running on the version finish with 200, then stops its instance', async () => {
    const fn = (await api(placement.url, 'POST', '/v2/svc/functions', {
      ...echoBody({ containerImage: 'test/counter:1', inferenceUrl: '/work', health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 } }),
      name: 'drained', containerEnvironment: [{ key: 'COUNTER_FILE', value: counterFile }],
    })).body.function;
    const version = `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`;
    await api(placement.url, 'POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 2 }],
    });
    await until('the version to be ACTIVE', async () => (await api(placement.url, 'GET', version)).body.function.status === 'ACTIVE');
    const invoke = (ms: number) => request(replica.url, 'POST', `/v2/svc/pexec/functions/${fn.id}`, {
      host: 'api.localhost', bearer: apiKey, body: { ms }, headers: { 'svc-poll-seconds': '60' },
    });
    await until('the replica to reach the instance', async () => (await invoke(0)).status === 200);

    const before = readFileSync(counterFile, 'utf8').split('\n').length;
    const answer = invoke(6_000);
    await until('the request to run on the instance', async () => readFileSync(counterFile, 'utf8').split('\n').length > before);
    const removed = await api(replica.url, 'DELETE', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}?graceful=true`);
    assert.equal(removed.status, 200, removed.text);

    const ended = await answer;
    assert.equal(ended.status, 200, ended.text);
    await until('the drained instance to stop', async () => (await api(placement.url, 'GET', version)).body.function.activeInstances?.length === 0);
  });
});
