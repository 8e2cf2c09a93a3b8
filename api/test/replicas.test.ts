// Two API replicas (`svc serve` processes) on one PostgreSQL and NATS JetStream, behind a round-robin
// client: one runs placement and the local cluster's agent, the other only serves the API. Requests from
// both share one instance's slots (maxRequestConcurrency across replicas), each runs once, a 202 is
// answered by either replica (once), and a kill -9 of a replica under load loses nothing: its 202'd
// requests are answered by the other. NATS wants credentials; a ready entry written by a client that has
// them but is no replica sends no request anywhere. A kill -9 of a replica under load: the other answers
// synchronously again within moments (the stall is printed), and every 202 it held that ran ends with the
// instance's answer, those it was sending included (the instance's node kept them: compute/keeper.ts).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Kvm } from '@nats-io/kv';
import { Pool } from 'undici';
import { createDatabase, postgresAvailable, tempDir, type TestDatabase } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { request } from './helpers/http.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { serveReplicaPair, type ServedPlatform } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

const ready = (await postgresAvailable()) && natsServerAvailable();

interface Answer {
  status: number;
  reqId: string;
  body: string;
}

describe('two API replicas on PostgreSQL and NATS JetStream', { skip: !ready }, () => {
  let database: TestDatabase;
  let nats: TestNats;
  let placement: ServedPlatform;
  let replica: ServedPlatform;
  let apiKey: string;
  let functionId: string;
  let versionId: string;
  const counterFile = path.join(tempDir(), 'requests.log');
  const pools = new Map<string, Pool>();

  const pool = (url: string) => {
    let found = pools.get(url);
    if (!found) pools.set(url, found = new Pool(url, { connections: 64 }));
    return found;
  };
  const invoke = async (url: string, ms: number, pollSeconds: number): Promise<Answer> => {
    const response = await pool(url).request({
      path: `/v2/svc/pexec/functions/${functionId}`, method: 'POST', body: JSON.stringify({ ms }),
      headers: { host: 'api.localhost', authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'svc-poll-seconds': String(pollSeconds) },
    });
    return { status: response.statusCode, reqId: String(response.headers['svc-reqid']), body: await response.body.text() };
  };
  const poll = async (url: string, reqId: string): Promise<Answer> => {
    const response = await pool(url).request({
      path: `/v2/svc/pexec/status/${reqId}`, method: 'GET',
      headers: { host: 'api.localhost', authorization: `Bearer ${apiKey}`, 'svc-poll-seconds': '5' },
    });
    return { status: response.statusCode, reqId, body: await response.body.text() };
  };
  /** Polls a 202'd request until its final answer (a minute at most: a request left waiting fails the test). */
  const finalAnswer = async (url: string, answer: Answer): Promise<Answer> => {
    let last = answer;
    const deadline = Date.now() + 60_000;
    while (last.status === 202) {
      if (Date.now() > deadline) throw new Error(`request ${answer.reqId} still answers 202 after a minute`);
      last = await poll(url, answer.reqId);
    }
    return last;
  };
  const runs = () => readFileSync(counterFile, 'utf8').trim().split('\n').filter(Boolean).map((line) => line.split(' '));
  /**
   * A 202'd request that ran ends with the instance's own answer, also when the replica sending it died:
   * its node's result keeper kept it. Only one the dead replica had claimed but not yet sent ends 502 (it
   * never ran, and is never run twice).
   */
  const assertEndsOfRuns = (finals: Answer[], ran: Set<string>) => {
    for (const final of finals) {
      if (ran.has(final.reqId)) {
        assert.equal(final.status, 200, `${final.reqId} ran: ${final.body}`);
        assert.equal(JSON.parse(final.body).id, final.reqId, 'the instance\'s own answer to that request');
      } else {
        assert.equal(final.status, 502, `${final.reqId} never ran: ${final.body}`);
        assert.match(JSON.parse(final.body).detail, /replica running the request stopped.*at-most-once/);
      }
    }
  };

  before(async () => {
    database = await createDatabase('postgres');
    nats = await startNats();
    // At info the second's log names its replica id (the head test needs it).
    ({ placement, replica } = await serveReplicaPair(database, nats.env, {}, { SVC_LOG_LEVEL: 'info' }));
    const credentials = await placement.credentials(['invoke_function', 'list_functions', 'queue_details']);
    apiKey = credentials.apiKey;
    const api = (method: string, url: string, body?: unknown) => request(placement.url, method, url, { host: 'api.localhost', bearer: credentials.token, body });
    const fn = (await api('POST', '/v2/svc/functions', {
      ...echoBody({ containerImage: 'test/counter:1', inferenceUrl: '/work', health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 } }),
      name: 'replicated-counter', containerEnvironment: [{ key: 'COUNTER_FILE', value: counterFile }],
    })).body.function;
    functionId = fn.id;
    versionId = fn.versionId;
    await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 2 }],
    });
    await until('the function to be ACTIVE', async () => (await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status === 'ACTIVE');
    // The second replica learns the ready instance over NATS (svc_ready): it answers as soon as it can grant.
    await until('the second replica to serve', async () => (await invoke(replica.url, 0, 5)).status === 200);
  });

  after(async () => {
    await Promise.all([...pools.values()].map((open) => open.close()));
    await replica?.stop();
    await placement?.stop();
    await database?.drop();
    await nats?.stop();
  });

  test('round robin: every request runs once, at most maxRequestConcurrency at a time across both; a 202 is answered by the other replica, once', async () => {
    const before = runs().length;
    const urls = [placement.url, replica.url];
    const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => invoke(urls[i % 2], 40, 1).then((answer) => ({ ...answer, from: i % 2 }))));
    assert.ok(answers.every((answer) => answer.status === 200 || answer.status === 202), `statuses ${answers.map((answer) => answer.status)}`);
    assert.ok(answers.some((answer) => answer.status === 202), 'a queue behind two slots outlasts a 1 s poll window');
    for (const answer of answers) {
      const other = urls[1 - answer.from];
      const final = await finalAnswer(other, answer);
      assert.equal(final.status, 200, final.body);
      assert.equal(JSON.parse(final.body).id, answer.reqId);
      if (answer.status === 202) assert.equal((await poll(urls[answer.from], answer.reqId)).status, 404, 'the answer is given once, whoever is asked');
    }
    const lines = runs().slice(before);
    assert.equal(lines.length, 60, 'each request ran once');
    assert.equal(new Set(lines.map(([id]) => id)).size, 60);
    assert.ok(Math.max(...lines.map(([, inFlight]) => Number(inFlight))) <= 2, 'never more than maxRequestConcurrency in flight across replicas');
  });

  test('input assets through the replica without agents: the placement replica has them put in place', async () => {
    const api = (url: string, method: string, target: string, options: { bearer?: string; body?: unknown; headers?: Record<string, string> } = {}) =>
      request(url, method, target, { host: 'api.localhost', bearer: apiKey, ...options });
    const token = (await placement.credentials([])).token;
    const mirror = (await api(placement.url, 'POST', '/v2/svc/functions', {
      bearer: token, body: { ...echoBody({ containerImage: 'test/mirror:1', inferenceUrl: '/predict' }), name: 'replicated-mirror' },
    })).body.function;
    await api(placement.url, 'POST', `/v2/svc/deployments/functions/${mirror.id}/versions/${mirror.versionId}`, {
      bearer: token, body: { deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1 }] },
    });
    const created = await api(replica.url, 'POST', '/v2/svc/assets', { body: { contentType: 'text/plain', description: 'via the replica' } });
    assert.equal(created.status, 200, created.text);
    const upload = new URL(created.body.uploadUrl);
    assert.equal((await request(replica.url, 'PUT', upload.pathname + upload.search, { host: 'api.localhost', body: 'replicated', headers: { 'content-type': 'text/plain' } })).status, 200);
    let answered;
    await until('the mirror to answer through the replica', async () => {
      answered = await api(replica.url, 'POST', `/v2/svc/pexec/functions/${mirror.id}`, { body: {}, headers: { 'svc-input-asset-references': created.body.assetId } });
      return answered.status === 200;
    });
    assert.deepEqual(answered!.body.assets, { [created.body.assetId]: 'replicated' });
  });

  test('a version undeployed, then deleted: its keys are gone from the NATS server', async (t) => {
    const token = (await placement.credentials([])).token;
    const api = (method: string, target: string, body?: unknown) => request(placement.url, method, target, { host: 'api.localhost', bearer: token, body });
    const fn = (await api('POST', '/v2/svc/functions', {
      ...echoBody({ containerImage: 'test/counter:1', inferenceUrl: '/work' }), name: 'replicated-short-lived', containerEnvironment: [{ key: 'COUNTER_FILE', value: counterFile }],
    })).body.function;
    await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 1 }],
    });
    await until('the function to be ACTIVE', async () => (await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status === 'ACTIVE');
    // More at once than its one slot, through both replicas: they share its slot.
    const call = (url: string) => pool(url).request({
      path: `/v2/svc/pexec/functions/${fn.id}`, method: 'POST', body: JSON.stringify({ ms: 100 }),
      headers: { host: 'api.localhost', authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'svc-poll-seconds': '10' },
    }).then((response) => response.body.text().then(() => response.statusCode));
    const statuses = await Promise.all([placement.url, replica.url, placement.url, replica.url].map(call));
    assert.deepEqual(statuses, [200, 200, 200, 200]);
    const client = await nats.connect();
    try {
      const kvm = new Kvm(client);
      // Read key by key: the bucket's key listing was seen to name a key whose entry was already deleted.
      const onServer = async () => {
        const found: string[] = [];
        for (const bucket of ['svc_ready', 'svc_slots']) {
          if ((await (await kvm.open(bucket)).get(fn.versionId))?.operation === 'PUT') found.push(`${bucket}/${fn.versionId}`);
        }
        return found;
      };
      assert.deepEqual(await onServer(), [`svc_ready/${fn.versionId}`, `svc_slots/${fn.versionId}`], 'the version has its keys while deployed');
      assert.equal((await api('DELETE', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`)).status, 200);
      assert.equal((await api('DELETE', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).status, 204);
      const deletedAt = Date.now();
      let left: string[] = [];
      await until('the version\'s keys to be deleted', async () => (left = await onServer()).length === 0, 30_000)
        .catch(() => assert.fail(`still on the server after 30 s: ${left.join(', ')}`));
      t.diagnostic(`the version's keys were gone ${Date.now() - deletedAt} ms after its deletion`);
    } finally {
      await client.close();
    }
  });

  test('a ready entry forged by a client with NATS credentials but not the installation\'s key: no request goes near its endpoint', async () => {
    let reached = 0;
    const trap: Server = createServer((_req, res) => {
      reached++;
      res.end(JSON.stringify({ id: 'the trap' }));
    });
    await new Promise<void>((resolve) => trap.listen(0, '127.0.0.1', resolve));
    const { port } = trap.address() as AddressInfo;
    const forger = await nats.connect();
    try {
      const kv = await new Kvm(forger).open('svc_ready');
      const genuine = (await kv.get(versionId))!.string();
      const [instance] = JSON.parse(genuine.slice(genuine.indexOf('.') + 1));
      const forged = JSON.stringify([{ ...instance, endpoint: { host: '127.0.0.1', ports: { inference: port, health: port } } }]);
      // The replica says when it has read (and dropped) an entry: the requests after that are the test.
      const dropped = () => readFileSync(path.join(replica.dataDir, 'output.log'), 'utf8').split('ready instances not signed by placement').length;
      // As entries were before they were signed (plain JSON), and with the genuine entry's signature in front.
      for (const entry of [forged, `${genuine.slice(0, genuine.indexOf('.'))}.${forged}`]) {
        const before = dropped();
        await kv.put(versionId, entry);
        await until('the replica to read the forged entry', async () => dropped() > before);
        const answers = await Promise.all(Array.from({ length: 6 }, () => invoke(replica.url, 0, 5)));
        assert.deepEqual(answers.map((answer) => answer.status), [200, 200, 200, 200, 200, 200]);
        for (const answer of answers) assert.equal(JSON.parse(answer.body).id, answer.reqId, 'answered by the function\'s own instance');
      }
      assert.equal(reached, 0, 'the forged endpoint was never called');
      // For replicas that start later and know no good entry: placement puts its own back at once.
      await until('placement to put its own entry back', async () => (await kv.get(versionId))!.string() === genuine);
    } finally {
      await forger.close();
      trap.close();
    }
  });

  test('a replica killed with kill -9 under load: its 202s are answered by the other, nothing runs twice', async (t) => {
    const before = runs().length;
    const urls = [placement.url, replica.url];
    let heldByReplica = 0;
    const load = Array.from({ length: 40 }, (_, i) => invoke(urls[i % 2], 200, 1).then((answer) => {
      if (answer.status === 202 && i % 2 === 1) heldByReplica++;
      return { ...answer, from: i % 2 };
    }, () => undefined));
    // The queue is 20 deep on each replica; 202s are out after the 1 s poll window, most requests still wait.
    await until('the replica to answer 202s', async () => heldByReplica > 0);
    await replica.kill9();
    const answers = (await Promise.all(load)).filter((answer) => answer !== undefined);
    const accepted = answers.filter((answer) => answer.status === 202);
    assert.ok(accepted.some((answer) => answer.from === 1), 'the killed replica had answered 202s');
    const finals = [];
    for (const answer of accepted) finals.push(await finalAnswer(placement.url, answer));
    const lines = runs().slice(before);
    t.diagnostic(`${answers.length} answered before or at the kill, ${accepted.length} with 202 (${accepted.filter((a) => a.from === 1).length} by the killed replica); `
      + `finals: ${finals.filter((f) => f.status === 200).length} × 200, ${finals.filter((f) => f.status === 502).length} × 502; ${lines.length} runs`);
    assertEndsOfRuns(finals, new Set(lines.map(([id]) => id)));
    assert.equal(new Set(lines.map(([id]) => id)).size, lines.length, 'no request ran twice');
    assert.ok(Math.max(...lines.map(([, inFlight]) => Number(inFlight))) <= 2);
  });

  test('a replica killed with kill -9 under load, with the other\'s requests waiting: the other soon answers synchronously again; its 202s end with the instance\'s answer', async (t) => {
    // The previous test killed the replica: it comes back (a new replica id).
    await replica.restart();
    await until('the replica back to serve', async () => (await invoke(replica.url, 0, 5)).status === 200)
    const before = runs().length;
    // Synchronous callers of the survivor, one after the other on 3 connections, noting when each 200 came.
    const answeredAt: number[] = [];
    const syncAnswers: Answer[] = [];
    let stopping = false;
    const callers = Array.from({ length: 3 }, async () => {
      while (!stopping) {
        const answer = await invoke(placement.url, 50, 30);
        syncAnswers.push(answer);
        if (answer.status === 200) answeredAt.push(Date.now());
      }
    });
    // The replica about to die queues requests beyond its 1 s poll window: 202s it holds.
    let held202 = 0;
    const accepted = Array.from({ length: 16 }, () => invoke(replica.url, 200, 1).then((answer) => {
      if (answer.status === 202) held202++;
      return answer;
    }, () => undefined));
    await until('the replica to answer 202s', async () => held202 > 0);
    const killedAt = Date.now();
    await replica.kill9();
    // When requests reach the instance after the kill (a line each in the counter file): whoever they are for.
    const startedAt: number[] = [];
    for (let count = runs().length; Date.now() < killedAt + 5000; await new Promise((resolve) => setTimeout(resolve, 10))) {
      const now = runs().length;
      if (now > count) startedAt.push(Date.now());
      count = now;
    }
    stopping = true;
    await Promise.all(callers);
    const held = (await Promise.all(accepted)).filter((answer): answer is Answer => answer?.status === 202);
    const finals = [];
    for (const answer of held) finals.push(await finalAnswer(placement.url, answer));
    const after = answeredAt.filter((at) => at >= killedAt);
    const longestGap = (times: number[]) => Math.max(times[0] - killedAt, ...times.slice(1).map((at, i) => at - times[i]));
    const lines = runs().slice(before);
    // The version serving nothing new is the stall: the slots the killed replica held come back once the
    // survivor finds it gone, and its queued 202s queue again on the survivor within 5 s.
    t.diagnostic(`after the kill: longest time with no request reaching the instance ${longestGap(startedAt)} ms, `
      + `without a synchronous 200 from the survivor ${longestGap(after)} ms (${after.length} in the 5 s after it); `
      + `${held.length} × 202 held by the killed replica, finals ${finals.map((final) => final.status).join(' ')}`);
    assert.ok(syncAnswers.every((answer) => answer.status === 200), `the survivor's synchronous answers: ${syncAnswers.map((answer) => answer.status)}`);
    assert.ok(after.length > 0, 'the survivor answered after the kill');
    assert.ok(held.length > 0, 'the killed replica had answered 202s');
    assertEndsOfRuns(finals, new Set(lines.map(([id]) => id)));
    assert.equal(new Set(lines.map(([id]) => id)).size, lines.length, 'no request ran twice');
  });

  test('a 202\'d request its replica was sending when killed ends with the instance\'s own answer: the instance\'s node kept it', async () => {
    await replica.restart();
    await until('the replica back to serve', async () => (await invoke(replica.url, 0, 5)).status === 200);
    // Answered 202 after its 1 s poll window while the instance still runs it for 3 s more.
    const answer = await invoke(replica.url, 4000, 1);
    assert.equal(answer.status, 202, answer.body);
    await until('the request to reach the instance', async () => runs().some(([id]) => id === answer.reqId));
    await replica.kill9();
    const final = await finalAnswer(placement.url, answer);
    assert.equal(final.status, 200, final.body);
    assert.equal(JSON.parse(final.body).id, answer.reqId, 'the instance\'s own answer to that request');
    assert.equal(runs().filter(([id]) => id === answer.reqId).length, 1, 'it ran once');
  });
});
