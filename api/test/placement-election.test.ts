// Placement as an elected role (compute.placement 'elected', docs/scale-out.md "Placement"): two `svc serve`
// replicas on one PostgreSQL and a NATS server of the test's own, and a real `svc agent` linked to the
// replica that does not hold the lease (its link is relayed to the holder). kill -9 of the holder: the
// other takes the lease, the agent links again and its instance is adopted (same id, same process), and a
// new deployment is placed. A write of the ended term is refused (the fence). SIGTERM of the new holder
// hands the lease to the first replica, started again. The gaps are printed, not asserted. A streaming
// session asked of the replica without the lease (sign-in, then its socket) is handed to the holder, whose
// broker knows the ready streaming instance; after the holder's kill -9 that session resumes through the
// new holder, whose broker carried it on from the store.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { WebSocket } from 'ws';
import { createInstancesRepo } from '../src/control/instances/repo.ts';
import { FencedOut, PlacementFence } from '../src/control/placement/fence.ts';
import { openDatabase } from '../src/database.ts';
import type { Store } from '../src/store/store.ts';
import { createDatabase, postgresAvailable, tempDir, type TestDatabase } from './helpers/databases.ts';
import { echoBody, streamingBody } from './helpers/fixtures.ts';
import { request } from './helpers/http.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { TEST_CATALOG } from './helpers/platform.ts';
import { agentInstances } from './helpers/processes.ts';
import { servePlatform, type ServedPlatform } from './helpers/served.ts';
import { boundMs, until } from './helpers/wait.ts';

const ready = (await postgresAvailable()) && natsServerAvailable();

interface LiveSession {
  ws: WebSocket;
  /** The broker's session id (svc-reqid). */
  sessionId: string;
  headers: Record<string, string>;
  /** The container's config: its resumeToken, and whether this socket resumed. */
  config: { resumed: boolean; resumeToken: string };
}
const svcBin = path.resolve(import.meta.dirname, '../bin/svc.js');
const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 };
const SPEC = { gpu: 'L40S', instanceType: 'LOCAL.GPU.L40S_1x', clusters: ['elected'], minInstances: 1, maxInstances: 1 };

/** A directory with an nvidia-smi that lists four L40S. */
function fourGpuHost(): string {
  const dir = tempDir('svc-gpus-');
  writeFileSync(path.join(dir, 'nvidia-smi'), `#!/bin/sh\nprintf "${'NVIDIA L40S, 46068 MiB\\n'.repeat(4)}"\n`);
  chmodSync(path.join(dir, 'nvidia-smi'), 0o755);
  return dir;
}

describe('placement elected among replicas', { skip: !ready }, () => {
  let database: TestDatabase;
  let nats: TestNats;
  let store: Store;
  let shared: Record<string, string>;
  let first: ServedPlatform;
  let second: ServedPlatform;
  let agent: ChildProcess;
  const agentState = tempDir('svc-agent-');
  const agentOutput: string[] = [];
  let token: string;
  let apiKey: string;
  let firstFn: { id: string; versionId: string };

  const lease = async () => (await store.db.selectFrom('placement_lease' as never).selectAll().executeTakeFirst()) as { holder: string; epoch: number } | undefined;
  const api = (url: string, method: string, target: string, body?: unknown, bearer = token) => request(url, method, target, { host: 'api.localhost', bearer, body });
  const record = async (url: string, fn: { id: string; versionId: string }) => (await api(url, 'GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function;
  const runningIds = async (url: string, fn: { id: string; versionId: string }): Promise<string[]> =>
    ((await record(url, fn))?.activeInstances ?? []).filter((instance: any) => instance.instanceStatus === 'RUNNING').map((instance: any) => instance.instanceId);

  const runningOnAgent = () => agentInstances(agentState);

  async function deployEcho(url: string, body: Record<string, unknown> = echoBody({ containerImage: 'local/echo:1', health })): Promise<{ id: string; versionId: string }> {
    const created = await api(url, 'POST', '/v2/svc/functions', { ...body, name: `elected-${randomBytes(3).toString('hex')}` });
    assert.equal(created.status, 200, created.text);
    const fn = created.body.function;
    const deployed = await api(url, 'POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, { deploymentSpecifications: [SPEC] });
    assert.equal(deployed.status, 200, deployed.text);
    return { id: fn.id, versionId: fn.versionId };
  }

  /** A streaming session's socket opened through the replica at `url`, once the container sent its config; undefined when refused (ask again). */
  const sessionSocket = (url: string, headers: Record<string, string>, hello: Record<string, unknown> = {}) => new Promise<LiveSession | undefined>((resolve, reject) => {
    const port = new URL(url).port;
    const ws = new WebSocket(`ws://127.0.0.1:${port}/sign_in?app=test`, { headers: { host: `api.localhost:${port}`, ...headers } });
    let sessionId = '';
    ws.once('upgrade', (response) => (sessionId = String(response.headers['svc-reqid'])));
    ws.once('open', () => ws.send(JSON.stringify({ type: 'hello', protocol: 1, ...hello })));
    ws.on('message', (data) => {
      const message = JSON.parse(data.toString());
      if (message.type === 'config') resolve({ ws, sessionId, headers, config: message });
    });
    ws.once('unexpected-response', (_req, response) => {
      response.resume();
      resolve(undefined); // an instance not yet ready, or a session being taken over: ask again
    });
    ws.once('error', reject);
  });
  let liveSession: LiveSession | undefined;

  /** When the agent's node was last granted its lease (a hello the holder answered), by the store. */
  const lastHello = async () => (await store.db.selectFrom('nodes').select(['updated_at', 'linked']).executeTakeFirst());

  before(async () => {
    database = await createDatabase('postgres');
    nats = await startNats();
    shared = {
      ...nats.env, SVC_DATABASE_URL: database.databaseUrl!, SVC_SECRETS_KEY: randomBytes(32).toString('base64'),
      SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_LOG_LEVEL: 'info', SVC_PLACEMENT: 'elected', SVC_LOCAL_CLUSTER: 'false',
      SVC_BLOB_DIR: path.join(tempDir(), 'blobs'),
    };
    first = await servePlatform(shared);
    store = await openDatabase({ dataDir: tempDir(), databaseUrl: database.databaseUrl });
    const held = await until('the first replica to hold the lease', lease, boundMs(20_000));
    second = await servePlatform(shared, { replica: true });
    assert.equal((await lease())?.epoch, held.epoch, 'the second replica leaves a live lease alone');
    ({ token, apiKey } = await first.credentials(['invoke_function', 'list_functions']));
    const registered = await api(first.url, 'POST', '/v1/accounts/svc-default/clusters', {
      clusterName: 'elected', clusterGroupName: 'elected-group', gpus: [{ name: 'L40S', capacity: 4, instanceTypes: [{ name: 'LOCAL.GPU.L40S_1x' }] }],
    });
    assert.equal(registered.status, 200, registered.text);
    // The agent knows both replicas, the one without the lease first: its link is relayed to the holder.
    agent = spawn(process.execPath, [svcBin, 'agent'], {
      env: {
        ...process.env, PATH: `${fourGpuHost()}:${process.env.PATH}`, SVC_AGENT_SERVER: `${second.url},${first.url}`,
        SVC_AGENT_CREDENTIAL: registered.body.agentCredential, SVC_AGENT_NODE_NAME: 'elected-node', SVC_AGENT_STATE_DIR: agentState,
        SVC_DATA_DIR: agentState, SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_LOG_LEVEL: 'info', SVC_AGENT_SANDBOX: 'off', SVC_AGENT_UDP_PORT_RANGE: '48700-48749',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    agent.stdout!.on('data', (chunk: Buffer) => agentOutput.push(chunk.toString()));
    agent.stderr!.on('data', (chunk: Buffer) => agentOutput.push(chunk.toString()));
  });

  after(async () => {
    if (agent && agent.exitCode === null && agent.signalCode === null) {
      const exited = new Promise((resolve) => agent.once('exit', resolve));
      agent.kill('SIGTERM');
      await exited;
    }
    await second?.stop();
    await first?.stop();
    await store?.close();
    await database?.drop();
    await nats?.stop();
  });

  test('an agent linked to a replica without the lease is served by the holder: its instance runs and answers', async () => {
    // Deployed through the replica without the lease: it prompts the holder over NATS.
    firstFn = await deployEcho(second.url);
    const [instanceId] = await until('the instance RUNNING', async () => {
      const ids = await runningIds(second.url, firstFn);
      return ids.length === 1 && ids;
    }, boundMs(60_000));
    assert.ok(runningOnAgent().has(instanceId), 'the agent runs it');
    assert.ok(agentOutput.join('').includes(new URL(second.url).port), 'linked through the replica without the lease');
    const invoked = await api(second.url, 'POST', `/v2/svc/pexec/functions/${firstFn.id}`, { hello: 'elected' }, apiKey);
    assert.deepEqual(invoked.body.echo, { hello: 'elected' });
  });

  test('a streaming session asked of the replica without the lease is brokered by the holder: sign-in and session socket handed over', async () => {
    const stream = await deployEcho(first.url, streamingBody({ containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '320x180' }] }));
    await until('the stream ACTIVE', async () => (await record(first.url, stream)).status === 'ACTIVE', boundMs(60_000));
    const headers = { authorization: `Bearer ${apiKey}`, 'svc-function-id': stream.id };
    const signIn = (method: string, more: Record<string, string> = {}) =>
      request(second.url, method, '/sign_in', { host: 'api.localhost', headers: { 'x-svc-absorb': 'true', ...headers, ...more } });
    let granted = await signIn('POST');
    // The instance may still be confirming that it is ready: ask again with the session's id.
    for (let asked = 0; granted.status === 202 && asked < 20; asked++) granted = await signIn('POST', { 'svc-reqid': granted.body.sessionId });
    assert.equal(granted.status, 200, granted.text);
    assert.equal((await signIn('DELETE', { 'svc-reqid': granted.body.sessionId })).status, 200);

    // The session's socket, opened on the replica without the lease, reaches the instance through the holder.
    // It stays open: the next test kills the holder under it.
    liveSession = await until('the instance\'s config over the handed-over socket', () => sessionSocket(second.url, headers), boundMs(60_000));
    assert.equal(liveSession.config.resumed, false);
  });

  test('kill -9 of the holder: the other replica takes the lease, adopts the running instance, places a new deployment; the old term cannot write', async (t) => {
    const before = await lease();
    const [instanceId] = await runningIds(second.url, firstFn);
    const pid = runningOnAgent().get(instanceId);
    assert.ok(pid);
    // Callers of the other replica go on through the kill: when each answer came, and what it was.
    const answers: { at: number; status: number }[] = [];
    let calling = true;
    const caller = (async () => {
      while (calling) {
        const answer = await api(second.url, 'POST', `/v2/svc/pexec/functions/${firstFn.id}`, { during: 'kill' }, apiKey);
        answers.push({ at: Date.now(), status: answer.status });
      }
    })();
    await until('the caller answered', async () => answers.length > 0);
    const killedAt = Date.now();
    await first.kill9();
    const taken = await until('another replica to hold the lease', async () => {
      const now = await lease();
      return now && now.epoch > before!.epoch && now;
    }, boundMs(30_000));
    const leaseMs = Date.now() - killedAt;
    await until('the agent\'s hello answered by the new holder', async () => {
      const node = await lastHello();
      return node?.linked === 1 && Date.parse(node.updated_at) >= killedAt;
    }, boundMs(30_000));
    const relinkedMs = Date.now() - killedAt;
    calling = false;
    await caller;
    const after = answers.filter((answer) => answer.at >= killedAt).map((answer) => answer.at);
    const longestGap = Math.max(after[0] - killedAt, ...after.slice(1).map((at, i) => at - after[i]));
    t.diagnostic(`kill -9 of the holder: lease taken after ${leaseMs} ms, the agent served again after ${relinkedMs} ms; `
      + `the other replica's caller: ${after.length} answers after the kill, at most ${longestGap} ms apart (lease 5000 ms; load ${os.loadavg()[0].toFixed(1)})`);
    assert.deepEqual([...new Set(answers.map((answer) => answer.status))], [200], 'every synchronous answer of the other replica through the kill');

    // The streaming session opened through the holder goes on: its browser comes back with its session id
    // and the container's resume token, and the new holder's broker hands it to the same container.
    const { sessionId, headers, config } = liveSession!;
    const resumed = await until('the streaming session resumed through the new holder', () => sessionSocket(second.url, { ...headers, 'svc-reqid': sessionId }, { resumeToken: config.resumeToken, hasPeer: false }), boundMs(30_000));
    assert.equal(resumed.config.resumed, true);
    assert.equal(resumed.sessionId, sessionId);
    t.diagnostic(`the streaming session resumed ${Date.now() - killedAt} ms after the kill`);
    resumed.ws.close();

    assert.deepEqual(await runningIds(second.url, firstFn), [instanceId], 'the same instance, adopted');
    assert.equal(runningOnAgent().get(instanceId), pid, 'not restarted');
    const invoked = await api(second.url, 'POST', `/v2/svc/pexec/functions/${firstFn.id}`, { after: 'kill' }, apiKey);
    assert.deepEqual(invoked.body.echo, { after: 'kill' });

    const next = await deployEcho(second.url);
    const [placed] = await until('a deployment made after the take-over RUNNING', async () => {
      const ids = await runningIds(second.url, next);
      return ids.length === 1 && ids;
    }, boundMs(60_000));
    assert.ok(runningOnAgent().has(placed), 'on the agent');

    // The killed replica's term has ended: a write fenced by it is refused, and changes nothing.
    const stale = createInstancesRepo(store.db, new PlacementFence(store.db, () => before!.epoch));
    await assert.rejects(stale.update(instanceId, { desired: 0 }), FencedOut);
    const row = await store.db.selectFrom('instances').select('desired').where('instance_id', '=', instanceId).executeTakeFirstOrThrow();
    assert.equal(row.desired, 1);
    const current = createInstancesRepo(store.db, new PlacementFence(store.db, () => taken.epoch));
    await current.update(instanceId, { message: null });
  });

  test('SIGTERM of the holder hands the lease over at once; the instances keep running', async (t) => {
    await first.restart();
    const before = await lease();
    const held = new Map(runningOnAgent());
    const stoppedAt = Date.now();
    const stopped = second.stop();
    await until('the restarted replica to hold the lease', async () => {
      const now = await lease();
      return now && now.epoch > before!.epoch;
    }, boundMs(30_000));
    const leaseMs = Date.now() - stoppedAt;
    await until('the agent\'s hello answered by the new holder', async () => {
      const node = await lastHello();
      return node?.linked === 1 && Date.parse(node.updated_at) >= stoppedAt;
    }, boundMs(30_000));
    t.diagnostic(`SIGTERM of the holder: lease taken after ${leaseMs} ms, the agent served again after ${Date.now() - stoppedAt} ms (load ${os.loadavg()[0].toFixed(1)})`);
    await stopped;
    const invoked = await api(first.url, 'POST', `/v2/svc/pexec/functions/${firstFn.id}`, { after: 'sigterm' }, apiKey);
    assert.deepEqual(invoked.body.echo, { after: 'sigterm' });
    assert.deepEqual(new Map(runningOnAgent()), held, 'the same instances, the same processes');
  });
});
