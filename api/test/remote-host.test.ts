// The control plane and a remote agent on two hosts: `svc serve` in one network namespace, `svc agent` in
// another, joined by a veth pair (helpers/netns.ts), the test in the host namespace with a link to the
// control plane only. The agent registers over the link, its instances are reached at the address it
// advertises, functions are invoked and a streaming session signals across the "network", and a link
// cut and restored loses no request that was answered 202.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { WebSocket } from 'ws';
import { request } from './helpers/http.ts';
import { createHosts, needsNetns, type Hosts } from './helpers/netns.ts';
import { TEST_CATALOG } from './helpers/platform.ts';
import { servePlatform, type ServedPlatform } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

const svcBin = path.resolve(import.meta.dirname, '../bin/svc.js');
const skip = needsNetns('the control plane and an agent on two hosts');
const REMOTE = { gpu: 'REMOTE', instanceType: 'REMOTE_1x', minInstances: 1, maxInstances: 1, clusters: ['remote'] };
const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 };

describe('a control plane and an agent on two hosts (network namespaces)', { skip }, () => {
  let hosts: Hosts;
  let served: ServedPlatform;
  let agent: ChildProcess;
  const agentState = mkdtempSync(path.join(os.tmpdir(), 'svc-remote-agent-'));
  let token: string;
  let key: string;
  let clusterId: string;
  const api = (method: string, url: string, options: Record<string, unknown> = {}) => request(served.url, method, url, { host: 'api.localhost', ...options });

  async function deployRemote(body: Record<string, unknown>, spec: Record<string, unknown> = {}) {
    const created = await api('POST', '/v2/svc/functions', { bearer: token, body: { name: `remote-${Math.random().toString(36).slice(2, 8)}`, ...body } });
    assert.equal(created.status, 200, created.text);
    const { id, versionId } = created.body.function;
    const deployed = await api('POST', `/v2/svc/deployments/functions/${id}/versions/${versionId}`, {
      bearer: token, body: { deploymentSpecifications: [{ ...REMOTE, ...spec }] },
    });
    assert.equal(deployed.status, 200, deployed.text);
    return { id, versionId };
  }

  const runningOn = (fn: { id: string; versionId: string }) => until('the remote instance running', async () => {
    const record = (await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: key })).body.function;
    return record.status === 'ACTIVE' && record.activeInstances.find((candidate: any) => candidate.instanceStatus === 'RUNNING');
  }, 60_000);

  before(async () => {
    hosts = await createHosts();
    served = await servePlatform({ SVC_HOST: '0.0.0.0', SVC_TURN_SERVER: 'none', SVC_LOG_LEVEL: 'warn', SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG },
      { wrap: hosts.exec(hosts.control.ns), address: hosts.control.address });
    ({ token, apiKey: key } = await served.credentials(['invoke_function', 'list_functions']));
    const registered = await api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token, body: { clusterName: 'remote', clusterGroupName: 'remote-group', gpus: [{ name: 'REMOTE', capacity: 4, instanceTypes: [{ name: 'REMOTE_1x' }] }] },
    });
    assert.equal(registered.status, 200, registered.text);
    clusterId = registered.body.clusterId;
    agent = spawn(hosts.exec(hosts.agent.ns)[0], [...hosts.exec(hosts.agent.ns).slice(1), process.execPath, svcBin, 'agent'], {
      env: {
        ...process.env, SVC_AGENT_SERVER: `http://${hosts.control.addressForAgent}:${served.port}`, SVC_AGENT_CREDENTIAL: registered.body.agentCredential,
        SVC_AGENT_ADVERTISE_HOST: hosts.agent.address, SVC_AGENT_STATE_DIR: agentState, SVC_DATA_DIR: agentState,
        SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_AGENT_UDP_PORT_RANGE: '48400-48419', SVC_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    await until('the agent connected', async () => {
      assert.equal(agent.exitCode, null, 'the agent runs');
      return (await api('GET', `/v1/accounts/svc-default/clusters/${clusterId}`, { bearer: token })).body.status === 'CONNECTED';
    }, 30_000);
  });

  after(async () => {
    if (agent && agent.exitCode === null) {
      agent.kill('SIGTERM');
      await new Promise((resolve) => agent.once('exit', resolve));
    }
    await served?.stop();
    await hosts?.remove();
    rmSync(agentState, { recursive: true, force: true });
  });

  test('a function on the remote host is invoked through the control plane', async () => {
    const fn = await deployRemote({ containerImage: 'local/echo:1', inferenceUrl: '/echo', inferencePort: 8000, health });
    const instance = await runningOn(fn);
    assert.equal(instance.location, 'remote');
    const invoked = await api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body: { across: 'namespaces' } });
    assert.equal(invoked.status, 200, invoked.text);
    assert.deepEqual(invoked.body.echo, { across: 'namespaces' });
  });

  test('a streaming session signals across the namespaces; the app offers its own host\'s address', async () => {
    const fn = await deployRemote({
      containerImage: 'local/streaming-app:1', functionType: 'STREAMING', inferenceUrl: '/sign_in', inferencePort: 49100,
      health: { protocol: 'HTTP', uri: '/v1/streaming/ready', port: 8011, timeout: 'PT10S', expectedStatusCode: 200 },
      containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '320x180' }, { key: 'STREAMING_ENCODER', value: 'libx264' }],
    }, { maxRequestConcurrency: 1 });
    await runningOn(fn);
    const ws = new WebSocket(`ws://${hosts.control.address}:${served.port}/sign_in`, {
      headers: { host: 'api.localhost', authorization: `Bearer ${key}`, 'svc-function-id': fn.id },
    });
    const messages: any[] = [];
    ws.on('message', (data) => messages.push(JSON.parse(data.toString())));
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    // The app trickles its candidates after the offer; the first is its host candidate.
    const candidate: string = await until('a candidate from the app', async () =>
      messages.find((message) => message.type === 'candidate' && message.candidate)?.candidate.candidate, 30_000);
    assert.ok(messages.some((message) => message.type === 'offer'));
    assert.match(candidate, new RegExp(` ${hosts.agent.address.replaceAll('.', '\\.')} \\d+ typ host`), 'its host candidate is on the agent\'s address');
    ws.send(JSON.stringify({ type: 'bye' }));
    ws.close();
  });

  test('a link cut until the control plane drops the agent, then restored, loses no request answered 202', async () => {
    const fn = await deployRemote({ containerImage: 'local/slow:1', inferenceUrl: '/slow', inferencePort: 8000, health }, { maxRequestConcurrency: 2 });
    await runningOn(fn);
    const invoke = (seconds: number) => api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body: { seconds }, headers: { 'svc-poll-seconds': '1' } });
    // Two running on the instance when the link goes, two more sent while it is down.
    const accepted = await Promise.all([invoke(2), invoke(2.5)]);
    await hosts.link('down');
    accepted.push(...await Promise.all([invoke(3), invoke(3.5)]));
    assert.deepEqual(accepted.map((response) => response.status), [202, 202, 202, 202]);
    // The control plane drops an agent whose link stays silent for two heartbeats; the agent, once the
    // link is back, finds its socket dead and connects again. Watched as TCP connections to the gateway.
    const agentLinks = () => hosts.connections(hosts.control.ns, served.port, hosts.agent.address);
    const [before] = await agentLinks();
    assert.ok(before, 'the agent link is a connection to the gateway');
    await until('the control plane to drop the silent agent', async () => !(await agentLinks()).includes(before), 60_000);
    await hosts.link('up');
    await until('the agent to connect again', async () => (await agentLinks()).length > 0, 60_000);
    const answers = await Promise.all(accepted.map(async (response) => {
      for (;;) {
        const answer = await api('GET', `/v2/svc/pexec/status/${response.headers['svc-reqid']}`, { bearer: key, headers: { 'svc-poll-seconds': '5' } });
        if (answer.status !== 202) return answer;
      }
    }));
    assert.deepEqual(answers.map((answer) => answer.status), [200, 200, 200, 200], JSON.stringify(answers.map((answer) => answer.body)));
    assert.deepEqual(answers.map((answer) => answer.body.seconds), [2, 2.5, 3, 3.5]);
  });
});
