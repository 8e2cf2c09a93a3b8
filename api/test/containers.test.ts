// Functions in containers: the platform with its agent on the docker runtime, against podman's Docker
// API (helpers/podman.ts) and the project's images. Deploy → RUNNING → invoke through the gateway, progress
// through the shared work dir, a container killed under the platform comes back, a streaming session on a
// containerised streaming app, and what cannot start (no such image, a wrong registry credential, an engine
// gone, a UDP port of the agent's pool taken) ends as ERROR with the engine's reason, after a bounded number
// of starts. And `svc agent` whose engine is down at start stops with one line.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import dgram from 'node:dgram';
import { once } from 'node:events';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { WebSocket } from 'ws';
import { START_ATTEMPTS } from '../src/compute/supervisor.ts';
import { agentNameOf } from '../src/compute/worker.ts';
import { RegistryStandIn } from './compute/fixtures/registry.ts';
import { freeUdpRange } from './compute/helpers.ts';
import { tempDir } from './helpers/databases.ts';
import { echoBody, streamingBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { request } from './helpers/http.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { containersLabelled, image, needsPodman, removeContainers, startEngine, type Engine } from './helpers/podman.ts';
import { freePort, until } from './helpers/wait.ts';

const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 };
const skip = needsPodman([image('echo'), image('slow'), image('streaming-app')], 'the platform on the docker runtime');

describe('the platform with its agent on the docker runtime (podman)', { skip }, () => {
  const registry = new RegistryStandIn('robot', 'pull-secret');
  let engine: Engine;
  let svc: TestPlatform;
  let token: string;
  let key: string;

  before(async () => {
    await registry.listen();
    engine = await startEngine({ insecureRegistries: [registry.host] });
    svc = await startTestPlatform({
      config: { compute: { agent: { runtime: 'docker', dockerSocket: engine.socketPath, healthIntervalMs: 2000 } } },
    });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
  });

  after(async () => {
    await svc?.close();
    // Closing the platform stops its instances; a failed test may leave some.
    if (engine) await removeContainers(engine, `svc.agent=${agentNameOf(path.join(svc.database.dataDir, 'agent'))}`);
    await engine?.close();
    await registry.close();
  });

  test('a function in a container: RUNNING, invoked through the gateway; a container killed under it is replaced and serves again', async () => {
    const fn = await deploy(svc, token, echoBody({ name: undefined, health, containerImage: image('echo') }));
    const record = await waitFor(svc, key, fn, running, 60_000);
    const [instance] = record.activeInstances;
    const invoked = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body: { in: 'a container' } });
    assert.equal(invoked.status, 200);
    assert.deepEqual(invoked.body.echo, { in: 'a container' });

    const [container] = await containersLabelled(engine, `svc.instance=${instance.instanceId}`);
    assert.equal((await engine.call('POST', `/containers/${container.Id}/kill?signal=SIGKILL`)).status, 204);
    await waitFor(svc, key, fn, (fresh) => fresh.activeInstances[0]?.instanceStatus !== 'RUNNING', 30_000);
    await waitFor(svc, key, fn, running, 60_000);
    const [replacement] = await containersLabelled(engine, `svc.instance=${instance.instanceId}`);
    assert.notEqual(replacement.Id, container.Id, 'a new container for the same instance');
    const again = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body: { after: 'restart' } });
    assert.deepEqual(again.body.echo, { after: 'restart' });
  });

  test('a polled request reports the progress the container writes into the shared work dir', async () => {
    const fn = await deploy(svc, token, echoBody({ name: undefined, health, containerImage: image('slow'), inferenceUrl: '/slow' }));
    await waitFor(svc, key, fn, running, 60_000);
    const accepted = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body: { seconds: 3 }, headers: { 'svc-poll-seconds': '1' } });
    assert.equal(accepted.status, 202);
    const reqId = String(accepted.headers['svc-reqid']);
    let percent = 0;
    for (let polls = 0; polls < 30; polls++) {
      const status = await request(svc.url, 'GET', `/v2/svc/pexec/status/${reqId}`, { host: 'api.localhost', bearer: key, headers: { 'svc-poll-seconds': '1' } });
      if (status.status === 200) {
        assert.deepEqual(status.body, { done: true, seconds: 3 });
        break;
      }
      percent = Math.max(percent, Number(status.headers['svc-percent-complete'] ?? 0));
    }
    assert.ok(percent > 0 && percent <= 100, `progress reached the caller (${percent}%)`);
  });

  test('a streaming session on a containerised streaming app: signaling through the gateway, after bye the container ends and is replaced', async () => {
    const fn = await deploy(svc, token, streamingBody({
      containerImage: image('streaming-app'),
      containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '320x180' }, { key: 'STREAMING_VIDEO_FPS', value: '15' },
        { key: 'STREAMING_ENCODER', value: 'libx264' }],
    }), { maxRequestConcurrency: 1 });
    const before = (await waitFor(svc, key, fn, running, 60_000)).activeInstances[0].instanceId;
    const port = new URL(svc.url).port;
    const ws = new WebSocket(`ws://127.0.0.1:${port}/sign_in`, {
      headers: { host: `api.localhost:${port}`, authorization: `Bearer ${key}`, 'svc-function-id': fn.id },
    });
    const messages: any[] = [];
    ws.on('message', (data) => messages.push(JSON.parse(data.toString())));
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    const offer = await until('the offer from the container', async () => messages.find((message) => message.type === 'offer'), 30_000);
    assert.match(offer.sdp, /^v=0/);
    ws.send(JSON.stringify({ type: 'bye' }));
    await until('bye', async () => messages.find((message) => message.type === 'bye'));
    ws.close();
    // The session is over: the container exits 0 on its own (EXITED), or the broker, told by its ready
    // endpoint that the session is over, retires it first (STOPPED); either way a fresh instance replaces it.
    await waitFor(svc, key, fn, (record) => record.activeInstances.some((instance: any) => instance.instanceId !== before), 60_000);
    await until('the old instance ended', async () => svc.logs.some((line) => line.includes(before) && /"instance (EXITED|STOPPED)"/.test(line)), 30_000);
  });

  test('an image the registry does not have, and a registry credential it refuses: ERROR with the engine\'s reason, invocations refused', async () => {
    const credential = await svc.api('POST', '/v2/svc/registry-credentials', {
      bearer: token,
      body: { registryHostname: registry.host, secret: { name: 'stand-in', value: Buffer.from('robot:pull-secret').toString('base64') } },
    });
    assert.equal(credential.status, 200);
    const missing = await deploy(svc, token, echoBody({ name: undefined, health, containerImage: `${registry.host}/team/missing:1` }));
    const failed = await waitFor(svc, key, missing, (record) => record.status === 'ERROR', 60_000);
    assert.equal(failed.activeInstances[0].instanceStatus, 'ERRORED');
    assert.ok(registry.authorizations.includes(`Basic ${Buffer.from('robot:pull-secret').toString('base64')}`), 'the account\'s credential reached the registry');
    await assertReason(svc, token, missing, /manifest unknown/);
    const refused = await svc.api('POST', `/v2/svc/pexec/functions/${missing.id}`, { bearer: key, body: {} });
    assert.equal(refused.status, 503);
    assert.match(String(refused.headers['content-type']), /^application\/problem\+json/);

    await svc.api('PATCH', `/v2/svc/registry-credentials/${credential.body.registryCredential.registryCredentialId}`, {
      bearer: token, body: { secret: { name: 'stand-in', value: Buffer.from('robot:wrong').toString('base64') } },
    });
    const unauthorized = await deploy(svc, token, echoBody({ name: undefined, health, containerImage: `${registry.host}/team/private:1` }));
    await waitFor(svc, key, unauthorized, (record) => record.status === 'ERROR', 60_000);
    await assertReason(svc, token, unauthorized, /unauthorized/);
  });

  test('an engine gone after the agent started: starts retried a bounded number of times, then ERROR saying the engine does not answer; invocations refused', async (t) => {
    const gone = await startEngine();
    const other = await startTestPlatform({ config: { compute: { agent: { runtime: 'docker', dockerSocket: gone.socketPath } } } });
    t.after(() => other.close());
    await gone.close();
    const otherToken = await other.token();
    const fn = await deploy(other, otherToken, echoBody({ name: undefined, health, containerImage: image('echo') }));
    const otherKey = await other.apiKey(otherToken, ['invoke_function', 'list_functions']);
    const failed = await waitFor(other, otherKey, fn, (record) => record.status === 'ERROR' && record.activeInstances[0]?.instanceStatus === 'ERRORED', 60_000);
    await assertReason(other, otherToken, fn, new RegExp(`^container engine at unix://${gone.socketPath} is not answering: ENOENT \\(${START_ATTEMPTS} starts in a row failed; not retried\\)$`));
    assertBoundedStarts(other, failed.activeInstances[0].instanceId);
    const refused = await other.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: otherKey, body: {} });
    assert.equal(refused.status, 503);
    assert.match(String(refused.headers['content-type']), /^application\/problem\+json/);
  });

  test('a UDP port of the agent\'s pool held by another process: the streaming instance is ERROR saying the pool is exhausted, after a bounded number of starts', async (t) => {
    const pool = await freeUdpRange(4);
    const holder = dgram.createSocket('udp4').bind(pool[0] + 1, '0.0.0.0');
    await once(holder, 'listening');
    t.after(() => holder.close());
    const other = await startTestPlatform({
      config: { compute: { agent: { runtime: 'docker', dockerSocket: engine.socketPath, udpPortRange: `${pool[0]}-${pool[1]}`, udpPortsPerInstance: 4 } } },
    });
    t.after(() => other.close());
    const otherToken = await other.token();
    const fn = await deploy(other, otherToken, streamingBody({ containerImage: image('streaming-app') }));
    const otherKey = await other.apiKey(otherToken, ['list_functions']);
    const failed = await waitFor(other, otherKey, fn, (record) => record.status === 'ERROR' && record.activeInstances[0]?.instanceStatus === 'ERRORED', 60_000);
    await assertReason(other, otherToken, fn, new RegExp(`^UDP port pool ${pool[0]}-${pool[1]} is exhausted .*\\(${START_ATTEMPTS} starts in a row failed; not retried\\)$`));
    assertBoundedStarts(other, failed.activeInstances[0].instanceId);
  });
});

/** The deployment's healthInfo carries the reason. */
async function assertReason(platform: TestPlatform, bearer: string, fn: Deployed, reason: RegExp) {
  const deployment = await platform.api('GET', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, { bearer });
  const [info] = deployment.body.deployment.healthInfo ?? [];
  assert.match(info?.error ?? '', reason, JSON.stringify(deployment.body.deployment.healthInfo));
  assert.equal(info.gpu, 'LOCAL');
}

/** The agent tried START_ATTEMPTS times: a restart after each failed start but the last, which was final. */
function assertBoundedStarts(platform: TestPlatform, instanceId: string) {
  const states = platform.logs.filter((line) => line.includes(instanceId)).map((line) => /"msg":"instance (\w+)"/.exec(line)?.[1]).filter(Boolean);
  assert.equal(states.filter((state) => state === 'RESTARTING').length, START_ATTEMPTS - 1, states.join(' '));
  assert.equal(states.at(-1), 'FAILED', states.join(' '));
}

describe('svc agent with its engine down at start', () => {
  test('stops with exit code 1 and one line naming the engine and why', async (t) => {
    const dir = tempDir('svc-agent-no-engine-');
    t.after(() => rm(dir, { recursive: true, force: true }));
    const env = {
      ...process.env, SVC_DATA_DIR: dir, SVC_AGENT_RUNTIME: 'docker', SVC_AGENT_DOCKER_SOCKET: path.join(dir, 'no-engine.sock'),
      SVC_AGENT_SERVER: `http://127.0.0.1:${await freePort()}`, SVC_AGENT_CREDENTIAL: 'svcagent-unused',
    };
    const child = execFile(process.execPath, [path.resolve(import.meta.dirname, '../bin/svc.js'), 'agent'], { env });
    let stderr = '';
    child.stderr!.on('data', (chunk) => { stderr += chunk; });
    const [code] = await once(child, 'exit');
    assert.equal(code, 1);
    assert.match(stderr, new RegExp(`^svc agent: container engine at unix://${path.join(dir, 'no-engine.sock')} is not answering: ENOENT\n$`));
  });
});
