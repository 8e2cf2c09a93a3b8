// The execution plane under failure: a kill -9 of the platform with requests answered 202, an instance
// killed mid-request, the function status lifecycle, undeploy, and a remote agent that keeps its
// instances across a restart of the control plane.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { tempDir } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { request } from './helpers/http.ts';
import { startTestPlatform, TEST_CATALOG, type TestPlatform } from './helpers/platform.ts';
import { servePlatform } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 };
const sample = (image: string, inferenceUrl: string) => echoBody({ name: undefined, containerImage: image, inferenceUrl, health });
const svcBin = path.resolve(import.meta.dirname, '../bin/svc.js');

/** Pids of the instances an agent runs, from its pid files (<stateDir>/pids/*.json). */
function instancePids(stateDir: string): number[] {
  const dir = path.join(stateDir, 'pids');
  return readdirSync(dir).map((file) => (JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as { pid: number }).pid);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Polls a 202'd request until its final answer. */
async function finalAnswer(url: string, key: string, reqId: string) {
  for (;;) {
    const response = await request(url, 'GET', `/v2/svc/pexec/status/${reqId}`, { host: 'api.localhost', bearer: key, headers: { 'svc-poll-seconds': '5' } });
    if (response.status !== 202) return response;
  }
}

describe('a kill -9 of the platform', () => {
  test('every request answered 202 is answered after the restart: queued ones run, the running one ends errored', async () => {
    const served = await servePlatform({ SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_LOG_LEVEL: 'warn' });
    try {
      const { token, apiKey } = await served.credentials(['invoke_function', 'list_functions']);
      const api = (method: string, url: string, options: Record<string, unknown> = {}) => request(served.url, method, url, { host: 'api.localhost', ...options });
      const fn = (await api('POST', '/v2/svc/functions', { bearer: token, body: { ...sample('local/slow:1', '/slow'), name: 'durable' } })).body.function;
      await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
        bearer: token, body: { deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1 }] },
      });
      await until('the function to be ACTIVE', async () =>
        (await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token })).body.function.status === 'ACTIVE');
      const accepted = await Promise.all([0, 1, 2, 3].map(() => api('POST', `/v2/svc/pexec/functions/${fn.id}`, {
        bearer: apiKey, body: { seconds: 1 }, headers: { 'svc-poll-seconds': '1' },
      })));
      assert.deepEqual(accepted.map((response) => response.status), [202, 202, 202, 202]);

      await served.kill9();
      await served.restart();

      const answers = await Promise.all(accepted.map((response) => finalAnswer(served.url, apiKey, String(response.headers['svc-reqid']))));
      const statuses = answers.map((answer) => answer.status).sort();
      assert.deepEqual(statuses, [200, 200, 200, 502], 'one was running at the kill; three were waiting');
      const errored = answers.find((answer) => answer.status === 502)!;
      assert.match(errored.body.detail, /restarted while the request was running.*at-most-once/);
      assert.equal(errored.headers['svc-status'], 'errored');
      for (const answer of answers.filter((candidate) => candidate.status === 200)) assert.deepEqual(answer.body, { done: true, seconds: 1 });
    } finally {
      await served.stop();
    }
  });
});

describe('instances failing', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  const stateDir = () => path.join(svc.database.dataDir, 'agent');

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
  });
  after(() => svc.close());

  test('an instance killed mid-request: that request ends errored, the one behind it runs on the restarted instance', async () => {
    const slow = await deploy(svc, token, sample('local/slow:1', '/slow'));
    await waitFor(svc, key, slow, running);
    const pidsBefore = new Set(instancePids(stateDir()));
    const running202 = await svc.api('POST', `/v2/svc/pexec/functions/${slow.id}`, { bearer: key, body: { seconds: 5 }, headers: { 'svc-poll-seconds': '1' } });
    const queued202 = await svc.api('POST', `/v2/svc/pexec/functions/${slow.id}`, { bearer: key, body: { seconds: 0.2 }, headers: { 'svc-poll-seconds': '1' } });
    assert.equal(running202.status, 202);
    assert.equal(queued202.status, 202);
    for (const pid of pidsBefore) process.kill(-pid, 'SIGKILL');

    const killed = await finalAnswer(svc.url, key, String(running202.headers['svc-reqid']));
    assert.equal(killed.status, 502);
    assert.match(killed.body.detail, /instance ended while running the request/);
    const requeued = await finalAnswer(svc.url, key, String(queued202.headers['svc-reqid']));
    assert.equal(requeued.status, 200);
    assert.deepEqual(requeued.body, { done: true, seconds: 0.2 });

    const record = await waitFor(svc, key, slow, running);
    assert.ok(record.activeInstances.length === 1);
    const transitions = svc.logs.filter((line) => line.includes('"function status"') && line.includes(slow.versionId)).map((line) => {
      const entry = JSON.parse(line);
      return `${entry.from}->${entry.to}`;
    });
    assert.ok(transitions.includes('ACTIVE->DEGRADED'), transitions.join(' '));
    assert.equal(transitions.at(-1), 'DEGRADED->ACTIVE', transitions.join(' '));
  });

  test('an image that cannot start: instance ERRORED, function ERROR, invocations refused with 503', async () => {
    const broken = await deploy(svc, token, sample('test/no-such-image:1', '/x'));
    const record = await waitFor(svc, key, broken, (fn) => fn.status === 'ERROR');
    assert.equal(record.activeInstances[0].instanceStatus, 'ERRORED');
    const refused = await svc.api('POST', `/v2/svc/pexec/functions/${broken.id}`, { bearer: key, body: {} });
    assert.equal(refused.status, 503);
    assert.equal(refused.headers['retry-after'], '5');
  });

  test('undeploying stops the instance and leaves the version INACTIVE', async () => {
    const pidsBefore = new Set(instancePids(stateDir()));
    const echo = await deploy(svc, token, sample('local/echo:1', '/echo'));
    await waitFor(svc, key, echo, running);
    const echoPids = instancePids(stateDir()).filter((pid) => !pidsBefore.has(pid));
    assert.equal(echoPids.length, 1);
    const removed = await svc.api('DELETE', `/v2/svc/deployments/functions/${echo.id}/versions/${echo.versionId}`, { bearer: token });
    assert.equal(removed.body.function.status, 'INACTIVE');
    const record = await waitFor(svc, key, echo, (fn) => fn.activeInstances.length === 0);
    assert.equal(record.status, 'INACTIVE');
    await until('the instance process to end', async () => !alive(echoPids[0]), 5_000);
  });
});

describe('a remote agent', () => {
  test('keeps its instances across a control-plane restart: it reconnects and resyncs, nothing is duplicated', async () => {
    const svc = await startTestPlatform();
    const agentState = tempDir();
    let agent: ReturnType<typeof spawn> | undefined;
    try {
      const token = await svc.token();
      const key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
      const registered = await svc.api('POST', '/v1/accounts/svc-default/clusters', {
        bearer: token, body: { clusterName: 'remote', clusterGroupName: 'remote-group', gpus: [{ name: 'REMOTE', capacity: 2, instanceTypes: [{ name: 'REMOTE_1x' }] }] },
      });
      agent = spawn(process.execPath, [svcBin, 'agent'], {
        env: {
          ...process.env, SVC_AGENT_SERVER: svc.url, SVC_AGENT_CREDENTIAL: registered.body.agentCredential, SVC_AGENT_STATE_DIR: agentState,
          SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_AGENT_UDP_PORT_RANGE: '48300-48399', SVC_LOG_LEVEL: 'warn', SVC_DATA_DIR: agentState,
          // The same process before and after is read from the unsandboxed runtime's pid files.
          SVC_AGENT_SANDBOX: 'off',
        },
        stdio: 'ignore',
      });
      const echo = await deploy(svc, token, sample('local/echo:1', '/echo'), { gpu: 'REMOTE', instanceType: 'REMOTE_1x', clusters: ['remote'] });
      const before = await waitFor(svc, key, echo, running);
      assert.equal(before.activeInstances[0].location, 'remote');
      const [pid] = instancePids(agentState);

      await svc.restart({ gateway: { port: svc.platform.port } });
      const after = await waitFor(svc, key, echo, (fn) => running(fn) && fn.activeInstances.length === 1);
      assert.equal(after.activeInstances[0].instanceId, before.activeInstances[0].instanceId, 'the same instance');
      assert.deepEqual(instancePids(agentState), [pid], 'the same process; none started twice');
      assert.ok(alive(pid));
      const cluster = await svc.api('GET', `/v1/accounts/svc-default/clusters/${registered.body.clusterId}`, { bearer: token });
      assert.equal(cluster.body.status, 'CONNECTED');
      const invoked = await svc.api('POST', `/v2/svc/pexec/functions/${echo.id}`, { bearer: key, body: { after: 'restart' } });
      assert.deepEqual(invoked.body.echo, { after: 'restart' });
    } finally {
      agent?.kill('SIGTERM');
      if (agent && agent.exitCode === null) await new Promise((resolve) => agent!.once('exit', resolve));
      await svc.close();
    }
  });
});
