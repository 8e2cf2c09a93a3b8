// Two API replicas on PostgreSQL and NATS JetStream while nats-server restarts (as an operator's upgrade
// restarts it: same address, same file store). The replicas reconnect on their own: both answer
// synchronously again, requests that were waiting or running across the restart end with the instance's
// answer, and what changes after the restart (a version deployed then) reaches the other replica, so the
// watches they had before it were set up again. While the server is down their readiness fails.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createDatabase, postgresAvailable, tempDir, type TestDatabase } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { request } from './helpers/http.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { TEST_CATALOG } from './helpers/platform.ts';
import { servePlatform, type ServedPlatform } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

const ready = (await postgresAvailable()) && natsServerAvailable();

describe('two API replicas while nats-server restarts', { skip: !ready }, () => {
  let database: TestDatabase;
  let nats: TestNats;
  let placement: ServedPlatform;
  let replica: ServedPlatform;
  let token: string;
  let apiKey: string;

  const api = (method: string, url: string, body?: unknown) => request(placement.url, method, url, { host: 'api.localhost', bearer: token, body });
  const invoke = async (url: string, functionId: string, ms: number, pollSeconds = 1) => {
    const response = await fetch(`${url}/v2/svc/pexec/functions/${functionId}`, {
      method: 'POST', body: JSON.stringify({ ms }),
      headers: { host: 'api.localhost', authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'svc-poll-seconds': String(pollSeconds) },
    });
    return { status: response.status, reqId: response.headers.get('svc-reqid') ?? '', body: await response.text() };
  };
  /** Polls a 202 until its final answer, asking either replica. */
  const finalAnswer = async (reqId: string) => {
    for (let asked = 0; ; asked++) {
      const url = [placement.url, replica.url][asked % 2]!;
      const response = await fetch(`${url}/v2/svc/pexec/status/${reqId}`, {
        headers: { host: 'api.localhost', authorization: `Bearer ${apiKey}`, 'svc-poll-seconds': '5' },
      });
      if (response.status !== 202) return { status: response.status, body: await response.text() };
      await response.body?.cancel();
      if (asked > 20) throw new Error(`request ${reqId} still answers 202`);
    }
  };
  /** Readiness, and what /health says of the replica's NATS connection. */
  const readiness = async (url: string) => {
    const ready = await fetch(`${url}/admin/health/readiness`, { headers: { host: 'api.localhost' } });
    await ready.body?.cancel();
    const report = await (await fetch(`${url}/health`, { headers: { host: 'api.localhost' } })).json() as { components: Record<string, { status: string }> };
    return { status: ready.status, nats: report.components.nats_client?.status };
  };
  const deploy = async (name: string) => {
    const fn = (await api('POST', '/v2/svc/functions', {
      ...echoBody({ containerImage: 'test/counter:1', inferenceUrl: '/work', health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 } }),
      name, containerEnvironment: [{ key: 'COUNTER_FILE', value: path.join(tempDir(), `${name}.log`) }],
    })).body.function;
    await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 2 }],
    });
    await until(`${name} to be ACTIVE`, async () => (await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status === 'ACTIVE');
    return fn.id as string;
  };

  before(async () => {
    database = await createDatabase('postgres');
    nats = await startNats();
    const shared = {
      ...nats.env, SVC_DATABASE_URL: database.databaseUrl, SVC_SECRETS_KEY: randomBytes(32).toString('base64'),
      SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_LOG_LEVEL: 'warn', SVC_BLOB_DIR: path.join(tempDir(), 'blobs'),
    };
    placement = await servePlatform(shared);
    replica = await servePlatform({ ...shared, SVC_PLACEMENT: 'false', SVC_LOCAL_CLUSTER: 'false' }, { replica: true });
    const credentials = await placement.credentials(['invoke_function', 'list_functions', 'deploy_function', 'register_function']);
    ({ token, apiKey } = credentials);
  });

  after(async () => {
    await replica?.stop();
    await placement?.stop();
    await database?.drop();
    await nats?.stop();
  });

  test('both replicas answer again, requests across the restart end with the instance\'s answer, a version deployed after it is served by either', async (t) => {
    const first = await deploy('before-restart');
    await until('the second replica to serve', async () => (await invoke(replica.url, first, 0, 5)).status === 200);
    // Four slots' worth of work on each replica, two slots: most wait in the queue through the restart.
    const load = Array.from({ length: 16 }, (_, i) => invoke([placement.url, replica.url][i % 2]!, first, 400));
    await new Promise((resolve) => setTimeout(resolve, 300));
    await nats.restart(async () => {
      // Readiness sends traffic elsewhere while a replica has no NATS.
      await until('both replicas to be unready', async () => (await Promise.all([placement.url, replica.url].map(readiness))).every((r) => r.status === 503 && r.nats === 'unhealthy'));
    });
    const backAt = Date.now();
    const answers = await Promise.all(load);
    let waitedMs = 0;
    await until('both replicas to answer synchronously', async () => {
      const both = await Promise.all([placement.url, replica.url].map((url) => invoke(url, first, 0, 5)));
      waitedMs = Date.now() - backAt;
      return both.every((answer) => answer.status === 200);
    }, 60_000);
    assert.deepEqual((await Promise.all([placement.url, replica.url].map(readiness))).map((r) => r.status), [200, 200], 'ready again');
    const finals = await Promise.all(answers.map((answer) => answer.status === 202 ? finalAnswer(answer.reqId) : answer));
    t.diagnostic(`both answered synchronously ${waitedMs} ms after the server was back (behind what was queued); of 16 requests, ${answers.filter((a) => a.status === 202).length} were 202s; `
      + `finals ${finals.map((f) => f.status).join(' ')}`);
    for (const [i, final] of finals.entries()) {
      assert.equal(final.status, 200, `request ${i}: ${final.body}`);
      assert.equal(JSON.parse(final.body).id, answers[i]!.reqId);
    }

    const second = await deploy('after-restart');
    await until('the other replica to serve the version deployed after the restart', async () => (await invoke(replica.url, second, 0, 5)).status === 200, 30_000);
  });
});
