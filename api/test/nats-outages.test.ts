// Two API replicas on PostgreSQL and NATS JetStream while NATS has an outage. A single server restarts (as
// an operator's upgrade restarts it: same address, same file store): the replicas reconnect on their own,
// their readiness fails while they have no server, both answer synchronously again, requests waiting or
// running across the restart end with the instance's answer, and a version deployed after the restart
// reaches the other replica (the watches were set up again). On a cluster of three servers with
// `natsReplicas` 3, the streams and buckets have three copies, and after a kill -9 of the server the
// replicas talk to every request still ends with the instance's answer (some first answered 503 with
// Retry-After while the cluster elected new leaders), none runs twice, and a version deployed after the
// kill is served by both. How long the replicas took to answer synchronously again is printed.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { createDatabase, postgresAvailable, tempDir, type TestDatabase } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { request } from './helpers/http.ts';
import { natsServerAvailable, startNats, startNatsCluster, type TestNats, type TestNatsCluster } from './helpers/nats.ts';
import { serveReplicaPair } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

const ready = (await postgresAvailable()) && natsServerAvailable();

type Deployed = { functionId: string; versionId: string; runs(): string[] };

/** A placement replica and a second one on `natsEnv`, with what the tests ask of them. */
async function replicaPair(database: TestDatabase, natsEnv: Record<string, string>) {
  const { placement, replica } = await serveReplicaPair(database, natsEnv);
  const urls = [placement.url, replica.url];
  const { token, apiKey } = await placement.credentials(['invoke_function', 'list_functions', 'deploy_function', 'register_function']);
  const api = (method: string, url: string, body?: unknown) => request(placement.url, method, url, { host: 'api.localhost', bearer: token, body });
  const headers = (pollSeconds: number) => ({ host: 'api.localhost', authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'svc-poll-seconds': String(pollSeconds) });

  let retried = 0;
  /** A request, sent again after a 503 that says when to try again, as a client does. */
  const invoke = async (url: string, functionId: string, ms: number, pollSeconds = 1): Promise<{ status: number; reqId: string; body: string }> => {
    const response = await fetch(`${url}/v2/svc/pexec/functions/${functionId}`, { method: 'POST', body: JSON.stringify({ ms }), headers: headers(pollSeconds) });
    const retryAfter = response.headers.get('retry-after');
    if (response.status === 503 && retryAfter) {
      await response.body?.cancel();
      retried++;
      await new Promise((resolve) => setTimeout(resolve, Number(retryAfter) * 1000));
      return invoke(url, functionId, ms, pollSeconds);
    }
    return { status: response.status, reqId: response.headers.get('svc-reqid') ?? '', body: await response.text() };
  };
  /** Polls a 202 until its final answer, asking either replica. */
  const finalAnswer = async (reqId: string) => {
    for (let asked = 0; ; asked++) {
      const response = await fetch(`${urls[asked % 2]}/v2/svc/pexec/status/${reqId}`, { headers: headers(5) });
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
    const counterFile = path.join(tempDir(), `${name}.log`);
    const fn = (await api('POST', '/v2/svc/functions', {
      ...echoBody({ containerImage: 'test/counter:1', inferenceUrl: '/work', health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 } }),
      name, containerEnvironment: [{ key: 'COUNTER_FILE', value: counterFile }],
    })).body.function;
    await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 2 }],
    });
    await until(`${name} to be ACTIVE`, async () => (await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status === 'ACTIVE');
    // After a cluster server's death, the watches may take a while to open again (JetStream's elections).
    await until(`the second replica to serve ${name}`, async () => (await invoke(replica.url, fn.id, 0, 5)).status === 200, 120_000);
    /** The request ids the instance ran, one line each. */
    const runs = () => readFileSync(counterFile, 'utf8').trim().split('\n').filter(Boolean).map((line) => line.split(' ')[0]!);
    return { functionId: fn.id as string, versionId: fn.versionId as string, runs };
  };
  /** 16 requests of 400 ms over two slots, sent to both: most wait in the queue through what `disturb` does. */
  const across = async ({ functionId, runs }: Deployed, disturb: () => Promise<void>) => {
    const load = Array.from({ length: 16 }, (_, i) => invoke(urls[i % 2]!, functionId, 400));
    await new Promise((resolve) => setTimeout(resolve, 300));
    await disturb();
    const calmAt = Date.now();
    const answers = await Promise.all(load);
    let serving = 0;
    await until('both replicas to answer synchronously', async () => {
      const both = await Promise.all(urls.map((url) => invoke(url, functionId, 0, 1)));
      serving = Date.now() - calmAt;
      return both.every((answer) => answer.status === 200);
    }, 120_000);
    const finals = await Promise.all(answers.map((answer) => answer.status === 202 ? finalAnswer(answer.reqId) : answer));
    for (const [i, final] of finals.entries()) {
      assert.equal(final.status, 200, `request ${i}: ${final.body}`);
      assert.equal(JSON.parse(final.body).id, answers[i]!.reqId);
    }
    const ran = runs();
    assert.equal(new Set(ran).size, ran.length, 'no request ran twice');
    return `both answered synchronously ${serving} ms after it (behind what was queued); of 16 requests ${answers.filter((a) => a.status === 202).length} were 202s, `
      + `all ended 200; ${retried} answers were a 503 to try again`;
  };
  return {
    placement, replica, urls, invoke, readiness, deploy, across,
    async stop() {
      await replica.stop();
      await placement.stop();
    },
  };
}

describe('two API replicas while nats-server restarts', { skip: !ready }, () => {
  let database: TestDatabase;
  let nats: TestNats;
  let pair: Awaited<ReturnType<typeof replicaPair>>;

  before(async () => {
    database = await createDatabase('postgres');
    nats = await startNats();
    pair = await replicaPair(database, nats.env);
  });
  after(async () => {
    await pair?.stop();
    await database?.drop();
    await nats?.stop();
  });

  test('both answer again, requests across the restart end with the instance\'s answer, a version deployed after it is served by either', async (t) => {
    t.diagnostic(await pair.across(await pair.deploy('before-restart'), () => nats.restart(async () => {
      await until('both replicas to be unready', async () => (await Promise.all(pair.urls.map(pair.readiness))).every((r) => r.status === 503 && r.nats === 'unhealthy'));
    })));
    assert.deepEqual((await Promise.all(pair.urls.map(pair.readiness))).map((r) => r.status), [200, 200], 'ready again');
    await pair.deploy('after-restart');
  });
});

describe('two API replicas on a NATS cluster of three, natsReplicas 3', { skip: !ready }, () => {
  let database: TestDatabase;
  let cluster: TestNatsCluster;
  let pair: Awaited<ReturnType<typeof replicaPair>>;

  before(async () => {
    database = await createDatabase('postgres');
    cluster = await startNatsCluster(3);
    pair = await replicaPair(database, cluster.env);
  });
  after(async () => {
    await pair?.stop();
    await database?.drop();
    await cluster?.stop();
  });

  test('buckets have three copies; a kill -9 of the server the replicas talk to: every request ends 200, both serve a version deployed after it', async (t) => {
    const deployed = await pair.deploy('on-a-cluster');
    const nc = await cluster.connect();
    try {
      const jsm = await jetstreamManager(nc);
      for (const name of ['KV_svc_ready', 'KV_svc_slots']) {
        const info = await jsm.streams.info(name);
        assert.equal(info.config.num_replicas, 3, `${name} asks for three copies`);
        // The leader and its followers; a bucket that has just been made lists all three as replicas until it has a leader.
        const servers = new Set([info.cluster?.leader, ...(info.cluster?.replicas ?? []).map((peer) => peer.name)].filter(Boolean));
        assert.equal(servers.size, 3, `${name} is on three servers: ${JSON.stringify(info.cluster)}`);
      }
    } finally {
      await nc.close();
    }
    t.diagnostic(await pair.across(deployed, async () => cluster.kill(0)));
    await pair.deploy('after-the-kill');
  });
});
