// Hosts come and go (issue 27, "Hosts"): real `svc agent` processes sharing one cluster credential are
// each a node of the cluster; capacity is their sum and placement spreads over them; a kill -9 of an agent
// and its instances lets its lease lapse, and its instances are replaced on the other node; an agent that
// was away (SIGSTOP) longer than its lease comes back to a newer generation and stops its old instances;
// cluster status follows the live links; a cluster whose only agent dies reads DISCONNECTED at once and
// its instances move to another cluster. A cluster's tasks spread over its nodes, one per free GPU, and a
// node's death ends only the tasks it ran. The lease is short here (compute.agentLeaseMs).
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SAMPLES_CATALOG } from './compute/helpers.ts';
import { hasStatus, TASK_KEY_SCOPES, taskBody, waitForTask } from './compute/tasks-fixtures.ts';
import { tempDir } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy, waitFor, type Deployed } from './helpers/functions.ts';
import { startTestPlatform, TEST_CATALOG, type TestPlatform } from './helpers/platform.ts';
import { agentInstances, isAlive } from './helpers/processes.ts';
import { boundMs, until } from './helpers/wait.ts';

const LEASE_MS = 3000;
const svcBin = path.resolve(import.meta.dirname, '../bin/svc.js');
const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 };
const echo = () => echoBody({ name: undefined, containerImage: 'local/echo:1', health });
const GPU = { gpu: 'L40S', instanceType: 'LOCAL.GPU.L40S_1x', clusters: ['hosts'] };

/** A directory with an nvidia-smi that lists `count` L40S: an agent with it on its PATH is a host with that many GPUs. */
function gpuHost(count: number): string {
  const dir = tempDir('svc-gpus-');
  writeFileSync(path.join(dir, 'nvidia-smi'), `#!/bin/sh\nprintf "${'NVIDIA L40S, 46068 MiB\\n'.repeat(count)}"\n`);
  chmodSync(path.join(dir, 'nvidia-smi'), 0o755);
  return dir;
}

interface AgentProcess {
  name: string;
  child: ChildProcess;
  stateDir: string;
  output: string[];
}

const instancesOf = (agent: AgentProcess) => agentInstances(agent.stateDir);

describe('hosts: nodes of a cluster, leases, fencing', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let clusterId: string;
  let credential: string;
  const gpuPath = gpuHost(2);
  const agents = new Map<string, AgentProcess>();

  function startAgent(name: string, udpRange: string, stateDir = tempDir(`svc-agent-${name}-`)): AgentProcess {
    const output: string[] = [];
    const child = spawn(process.execPath, [svcBin, 'agent'], {
      env: {
        ...process.env, PATH: `${gpuPath}:${process.env.PATH}`, SVC_AGENT_SERVER: svc.url, SVC_AGENT_CREDENTIAL: credential,
        SVC_AGENT_NODE_NAME: name, SVC_AGENT_STATE_DIR: stateDir, SVC_DATA_DIR: stateDir, SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG,
        SVC_AGENT_UDP_PORT_RANGE: udpRange, SVC_LOG_LEVEL: 'info', SVC_AGENT_SANDBOX: 'off',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    const agent = { name, child, stateDir, output };
    agents.set(name, agent);
    return agent;
  }

  async function stopAgent(agent: AgentProcess): Promise<void> {
    if (agent.child.exitCode !== null || agent.child.signalCode !== null) return;
    const exited = new Promise((resolve) => agent.child.once('exit', resolve));
    agent.child.kill('SIGCONT');
    agent.child.kill('SIGTERM');
    await exited;
  }

  const cluster = async () => (await svc.api('GET', `/v1/accounts/svc-default/clusters/${clusterId}`, { bearer: token })).body;
  const nodeStatus = (record: any, name: string) => record.nodes?.find((node: any) => node.name === name);
  const runningCount = (fn: Deployed, count: number) => (record: any) =>
    record.activeInstances.filter((instance: any) => instance.instanceStatus === 'RUNNING').length === count;

  before(async () => {
    svc = await startTestPlatform({ config: { compute: { agentLeaseMs: LEASE_MS } } });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    const registered = await svc.api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token,
      body: { clusterName: 'hosts', clusterGroupName: 'hosts-group', gpus: [{ name: 'L40S', capacity: 2, instanceTypes: [{ name: 'LOCAL.GPU.L40S_1x' }] }] },
    });
    assert.equal(registered.status, 200);
    ({ clusterId, agentCredential: credential } = registered.body);
  });

  after(async () => {
    for (const agent of agents.values()) await stopAgent(agent);
    await svc.close();
  });

  test('two agents of one cluster are two nodes: cluster status lists both, capacity is their sum, both get work', async () => {
    assert.equal((await cluster()).status, 'REGISTERED');
    startAgent('node-a', '48500-48549');
    startAgent('node-b', '48550-48599');
    const connected = await until('both nodes linked', async () => {
      const record = await cluster();
      return record.status === 'CONNECTED' && nodeStatus(record, 'node-a')?.status === 'CONNECTED' && nodeStatus(record, 'node-b')?.status === 'CONNECTED' && record;
    }, boundMs(30_000));
    assert.deepEqual(connected.gpus.map((gpu: any) => [gpu.name, gpu.capacity]), [['L40S', 4]], 'two hosts of two GPUs');
    assert.deepEqual(nodeStatus(connected, 'node-a').gpus, [{ name: 'L40S', capacity: 2 }]);

    const wide = await deploy(svc, token, echo(), { ...GPU, minInstances: 4, maxInstances: 4 });
    const record = await waitFor(svc, key, wide, runningCount(wide, 4), boundMs(60_000));
    assert.equal(record.status, 'ACTIVE');
    assert.deepEqual([instancesOf(agents.get('node-a')!).size, instancesOf(agents.get('node-b')!).size], [2, 2], 'more than one host holds, spread over both');
    const invoked = await svc.api('POST', `/v2/svc/pexec/functions/${wide.id}`, { bearer: key, body: { hello: 'nodes' } });
    assert.deepEqual(invoked.body.echo, { hello: 'nodes' });

    await svc.api('DELETE', `/v2/svc/deployments/functions/${wide.id}/versions/${wide.versionId}`, { bearer: token });
    await until('the wide deployment stopped on both nodes', async () => instancesOf(agents.get('node-a')!).size + instancesOf(agents.get('node-b')!).size === 0, boundMs(30_000));
  });

  test('kill -9 of an agent and its instances: its node shows DISCONNECTED, its lease lapses, its instances are replaced on the other node', async (t) => {
    const fn = await deploy(svc, token, echo(), { ...GPU, minInstances: 2, maxInstances: 2 });
    await waitFor(svc, key, fn, runningCount(fn, 2), boundMs(60_000));
    const [nodeA, nodeB] = [agents.get('node-a')!, agents.get('node-b')!];
    assert.deepEqual([instancesOf(nodeA).size, instancesOf(nodeB).size], [1, 1], 'spread: one on each node');
    const [lostId] = [...instancesOf(nodeA).keys()];

    const pids = [...instancesOf(nodeA).values()];
    const killedAt = Date.now();
    process.kill(nodeA.child.pid!, 'SIGKILL');
    for (const pid of pids) process.kill(-pid, 'SIGKILL');

    const disconnected = await until('node-a no longer linked', async () => {
      const record = await cluster();
      return nodeStatus(record, 'node-a')?.status === 'DISCONNECTED' && record;
    }, boundMs(20_000));
    assert.equal(disconnected.status, 'CONNECTED', 'node-b still links the cluster');

    const healed = await waitFor(svc, key, fn, (record) => runningCount(fn, 2)(record)
      && !record.activeInstances.some((instance: any) => instance.instanceId === lostId), boundMs(60_000));
    t.diagnostic(`replaced and running ${Date.now() - killedAt} ms after the kill (lease ${LEASE_MS} ms; load ${os.loadavg()[0].toFixed(1)})`);
    assert.equal(healed.status, 'ACTIVE');
    assert.equal(instancesOf(nodeB).size, 2, 'both instances on node-b now');
    assert.ok(svc.logs.some((line) => line.includes('node lease lapsed') && line.includes('"node-a"')), 'replaced because the lease lapsed');
    assert.ok(svc.logs.some((line) => line.includes('instances LOST with their node')));
    assert.equal((await cluster()).gpus[0].capacity, 2, 'capacity is node-b\'s alone');
    for (let i = 0; i < 4; i++) {
      const invoked = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body: { call: i } });
      assert.equal(invoked.status, 200, 'callers reach only live instances');
    }
  });

  test('an agent away longer than its lease comes back to a newer generation and stops its old instances', async () => {
    const returned = startAgent('node-a', '48500-48549');
    await until('node-a linked again', async () => nodeStatus(await cluster(), 'node-a')?.status === 'CONNECTED', boundMs(30_000));
    const fn = await deploy(svc, token, echo(), { ...GPU, minInstances: 1, maxInstances: 1 });
    // node-b holds two already: the new instance goes to node-a, the one with room.
    await waitFor(svc, key, fn, runningCount(fn, 1), boundMs(60_000));
    const nodeB = agents.get('node-b')!;
    const before = new Map(instancesOf(nodeB));
    assert.equal(before.size, 2);
    assert.equal(instancesOf(returned).size, 1);
    const generation = nodeStatus(await cluster(), 'node-b').generation;

    nodeB.child.kill('SIGSTOP');
    await until('node-b\'s lease lapsed', async () => svc.logs.some((line) => line.includes('node lease lapsed') && line.includes('"node-b"')), boundMs(30_000));
    const stale = await cluster();
    assert.equal(nodeStatus(stale, 'node-b').status, 'DISCONNECTED');
    assert.ok([...before.values()].every(isAlive), 'its instances still run while it is away');
    nodeB.child.kill('SIGCONT');

    await until('node-b stopped the instances of its old generation', async () => [...before.values()].every((pid) => !isAlive(pid)), boundMs(30_000));
    const back = await until('node-b linked again', async () => {
      const record = await cluster();
      return nodeStatus(record, 'node-b')?.status === 'CONNECTED' && record;
    }, boundMs(30_000));
    assert.ok(nodeStatus(back, 'node-b').generation > generation, 'a newer generation');
    assert.ok(nodeB.output.join('').includes('stopping the instances of the old generation'));
    for (const instanceId of before.keys()) assert.equal(instancesOf(nodeB).has(instanceId), false);
  });

  test('with every agent gone the cluster reads DISCONNECTED', async () => {
    for (const agent of agents.values()) await stopAgent(agent);
    const record = await until('no live link', async () => {
      const current = await cluster();
      return current.status === 'DISCONNECTED' && current;
    }, boundMs(20_000));
    assert.deepEqual(record.nodes.map((node: any) => node.status), ['DISCONNECTED', 'DISCONNECTED']);
  });
});

describe('hosts: the tasks of a cluster of two nodes of one GPU each', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let clusterId: string;
  let credential: string;
  const gpuPath = gpuHost(1);
  const agents = new Map<string, AgentProcess>();
  const gpu = { gpu: 'L40S', instanceType: 'LOCAL.GPU.L40S_1x' };
  /** Long enough to outlast the test (1000 steps of 50 ms); canceled at its end. */
  const long = (name: string) => taskBody({ name, gpuSpecification: gpu }, { TASK_STEPS: '1000', TASK_STEP_MS: '50' });

  const udpRanges = ['48850-48899', '48900-48949', '48950-48999'];

  function startAgent(name: string): AgentProcess {
    const stateDir = tempDir(`svc-agent-${name}-`);
    const child = spawn(process.execPath, [svcBin, 'agent'], {
      env: {
        ...process.env, PATH: `${gpuPath}:${process.env.PATH}`, SVC_AGENT_SERVER: svc.url, SVC_AGENT_CREDENTIAL: credential, SVC_AGENT_NODE_NAME: name,
        SVC_AGENT_STATE_DIR: stateDir, SVC_DATA_DIR: stateDir, SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_LOG_LEVEL: 'warn', SVC_AGENT_SANDBOX: 'off',
        SVC_AGENT_TASK_PROGRESS_INTERVAL_MS: '100', SVC_AGENT_UDP_PORT_RANGE: udpRanges[agents.size],
      },
      stdio: 'ignore',
    });
    const agent = { name, child, stateDir, output: [] };
    agents.set(name, agent);
    return agent;
  }

  const launch = async (body: object) => {
    const launched = await svc.api('POST', '/v1/svct/tasks', { bearer: key, body });
    assert.equal(launched.status, 200);
    return launched.body.task.id as string;
  };
  /** The node whose agent runs the task's process. */
  const nodeOf = (task: any) => [...agents.values()].find((agent) => instancesOf(agent).has(task.instances[0].instanceId))?.name;

  before(async () => {
    svc = await startTestPlatform({ config: { compute: { agentLeaseMs: LEASE_MS }, tasks: { schedulerIntervalMs: 100 } } });
    token = await svc.token();
    key = await svc.apiKey(token, TASK_KEY_SCOPES, { task: true });
    const registered = await svc.api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token, body: { clusterName: 'task-hosts', clusterGroupName: 'task-hosts-group', gpus: [{ name: 'L40S', capacity: 8, instanceTypes: [{ name: 'LOCAL.GPU.L40S_1x' }] }] },
    });
    ({ clusterId, agentCredential: credential } = registered.body);
    startAgent('first');
    startAgent('second');
    const linked = await until('both nodes linked', async () => {
      const record = (await svc.api('GET', `/v1/accounts/svc-default/clusters/${clusterId}`, { bearer: token })).body;
      return record.nodes?.filter((node: any) => node.status === 'CONNECTED').length === 2 && record;
    }, boundMs(30_000));
    assert.deepEqual(linked.gpus.map((offer: any) => [offer.name, offer.capacity]), [['L40S', 2]], 'the nodes\' GPUs, not the registration\'s 8');
  });

  after(async () => {
    for (const { child } of agents.values()) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    await svc.close();
  });

  let running: any[] = [];
  let waiting: string;

  test('two tasks run at once, one on each node; a third waits for a free GPU', async () => {
    const ids = [await launch(long('one')), await launch(long('two'))];
    waiting = await launch(taskBody({ name: 'three', gpuSpecification: gpu }, { TASK_STEPS: '40', TASK_STEP_MS: '50' }));
    running = await Promise.all(ids.map((id) => waitForTask(svc.api, key, id, hasStatus('RUNNING'), boundMs(30_000))));
    const nodes = await Promise.all(running.map((task) => until(`the node running ${task.name}`, async () => nodeOf(task), boundMs(10_000))));
    assert.deepEqual(nodes.sort(), ['first', 'second'], 'spread: one task on each node');
    assert.deepEqual([...agents.values()].map((agent) => instancesOf(agent).size), [1, 1], 'no node runs more than its one GPU');
    assert.equal((await waitForTask(svc.api, key, waiting, () => true)).status, 'QUEUED', 'both GPUs are taken: the third waits');
  });

  test('kill -9 of a node and its task: once its lease lapses only its own task ends; the other node\'s runs on', async () => {
    const [lost, kept] = running;
    const doomed = agents.get(nodeOf(lost)!)!;
    const survivor = agents.get(nodeOf(kept)!)!;
    const keptPid = instancesOf(survivor).get(kept.instances[0].instanceId)!;
    const orphans = [...instancesOf(doomed).values()];
    process.kill(doomed.child.pid!, 'SIGKILL');
    for (const pid of orphans) process.kill(-pid, 'SIGKILL');

    const ended = await waitForTask(svc.api, key, lost.id, hasStatus('ERRORED', 'COMPLETED'), boundMs(30_000));
    assert.equal(ended.status, 'ERRORED');
    assert.match(ended.healthInfo.error, new RegExp(`its node '${doomed.name}' lost its lease`));
    assert.ok(svc.logs.some((line) => line.includes('node lease lapsed') && line.includes(`"${doomed.name}"`)), 'ended when the lease lapsed');

    const alive = (await waitForTask(svc.api, key, kept.id, () => true));
    assert.equal(alive.status, 'RUNNING', 'the other node\'s task is not touched');
    assert.ok(isAlive(keptPid), 'its process runs on');
    assert.equal((await waitForTask(svc.api, key, waiting, () => true)).status, 'QUEUED', 'the lost node\'s GPU is not offered any more');

    // The survivor's GPU freed: the waiting task runs there.
    assert.equal((await svc.api('POST', `/v1/svct/tasks/${kept.id}/cancel`, { bearer: key })).status, 200);
    const third = await waitForTask(svc.api, key, waiting, hasStatus('RUNNING', 'COMPLETED', 'ERRORED'), boundMs(30_000));
    assert.equal(third.status, 'RUNNING');
    assert.equal(await until('the node running the third task', async () => nodeOf(third), boundMs(10_000)), survivor.name);
    assert.equal((await waitForTask(svc.api, key, waiting, hasStatus('COMPLETED', 'ERRORED'), boundMs(30_000))).status, 'COMPLETED');
  });

  test('a node away longer than its lease comes back and stops the task it held: it ended ERRORED and runs nowhere twice', async () => {
    const node = [...agents.values()].find((agent) => agent.child.exitCode === null && agent.child.signalCode === null)!;
    const id = await launch(long('cut-off'));
    const task = await waitForTask(svc.api, key, id, hasStatus('RUNNING'), boundMs(30_000));
    const pid = await until('the task\'s process', async () => instancesOf(node).get(task.instances[0].instanceId), boundMs(10_000));

    node.child.kill('SIGSTOP');
    const ended = await waitForTask(svc.api, key, id, hasStatus('ERRORED', 'COMPLETED'), boundMs(30_000));
    assert.match(ended.healthInfo.error, /lost its lease/);
    assert.ok(isAlive(pid), 'cut off, the node still runs it');
    node.child.kill('SIGCONT');

    await until('the returning node stopped the task', async () => !isAlive(pid), boundMs(30_000));
    // The process is gone a moment before the agent's report of its stop reaches the control plane.
    const after = await waitForTask(svc.api, key, id, (found) => found.instances[0]?.instanceState === 'TERMINATED', boundMs(10_000));
    assert.equal(after.status, 'ERRORED', 'its end stays as it was');
    assert.equal(after.instances[0].instanceState, 'TERMINATED', 'the agent\'s report of its stop is recorded');
  });

  test('functions and tasks share a node\'s GPUs: an instance goes to the node a task leaves free', async () => {
    const [live] = [...agents.values()].filter((agent) => agent.child.exitCode === null && agent.child.signalCode === null);
    const added = startAgent('third');
    await until('the third node linked', async () => {
      const record = (await svc.api('GET', `/v1/accounts/svc-default/clusters/${clusterId}`, { bearer: token })).body;
      return record.nodes?.some((node: any) => node.name === 'third' && node.status === 'CONNECTED');
    }, boundMs(30_000));
    const task = await waitForTask(svc.api, key, await launch(long('beside')), hasStatus('RUNNING'), boundMs(30_000));
    const taskNode = await until('the node running the task', async () => nodeOf(task), boundMs(10_000));
    const free = taskNode === live.name ? added : live;

    const functionKey = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    const fn = await deploy(svc, token, echo(), { ...gpu, clusters: ['task-hosts'], minInstances: 1, maxInstances: 1 });
    const record = await waitFor(svc, functionKey, fn, (current) => current.activeInstances.some((instance: any) => instance.instanceStatus === 'RUNNING'), boundMs(60_000));
    assert.ok(instancesOf(free).has(record.activeInstances[0].instanceId), `the instance runs on ${free.name}, the node without the task`);
    assert.equal(instancesOf(agents.get(taskNode)!).size, 1, 'the task\'s node holds the task alone');
  });
});

describe('hosts: a cluster whose only agent dies', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  const gpuPath = gpuHost(2);
  const children = new Map<string, AgentProcess>();

  async function register(name: string) {
    const registered = await svc.api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token, body: { clusterName: name, clusterGroupName: 'regions', gpus: [{ name: 'L40S', instanceTypes: [{ name: 'LOCAL.GPU.L40S_1x' }] }] },
    });
    assert.equal(registered.status, 200);
    const stateDir = tempDir(`svc-agent-${name}-`);
    const output: string[] = [];
    const child = spawn(process.execPath, [svcBin, 'agent'], {
      env: {
        ...process.env, PATH: `${gpuPath}:${process.env.PATH}`, SVC_AGENT_SERVER: svc.url, SVC_AGENT_CREDENTIAL: registered.body.agentCredential,
        SVC_AGENT_STATE_DIR: stateDir, SVC_DATA_DIR: stateDir, SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_LOG_LEVEL: 'warn', SVC_AGENT_SANDBOX: 'off',
        SVC_AGENT_UDP_PORT_RANGE: name === 'east' ? '48600-48649' : '48650-48699',
      },
      stdio: 'ignore',
    });
    children.set(name, { name, child, stateDir, output });
    return registered.body.clusterId as string;
  }

  after(async () => {
    for (const { child } of children.values()) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    await svc?.close();
  });

  test('it reads DISCONNECTED at once, offers nothing once its lease lapses, and its instances run on another cluster', async () => {
    svc = await startTestPlatform({ config: { compute: { agentLeaseMs: LEASE_MS } } });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    const east = await register('east');
    await register('west');
    const status = async (clusterId: string) => (await svc.api('GET', `/v1/accounts/svc-default/clusters/${clusterId}`, { bearer: token })).body;
    const fn = await deploy(svc, token, echo(), { gpu: 'L40S', instanceType: 'LOCAL.GPU.L40S_1x', minInstances: 2, maxInstances: 2 });
    await waitFor(svc, key, fn, (record) => record.activeInstances.filter((instance: any) => instance.instanceStatus === 'RUNNING').length === 2, boundMs(60_000));
    const [eastAgent, westAgent] = [children.get('east')!, children.get('west')!];
    assert.deepEqual([instancesOf(eastAgent).size, instancesOf(westAgent).size], [1, 1], 'the least loaded cluster first: one each');

    const pids = [...instancesOf(eastAgent).values()];
    process.kill(eastAgent.child.pid!, 'SIGKILL');
    for (const pid of pids) process.kill(-pid, 'SIGKILL');
    await until('east reads DISCONNECTED', async () => (await status(east)).status === 'DISCONNECTED', boundMs(10_000));

    const healed = await waitFor(svc, key, fn, (record) => record.activeInstances.filter((instance: any) => instance.instanceStatus === 'RUNNING').length === 2
      && record.activeInstances.every((instance: any) => instance.location === 'west'), boundMs(60_000));
    assert.equal(healed.status, 'ACTIVE');
    assert.equal(instancesOf(westAgent).size, 2);
    const invoked = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body: { after: 'east' } });
    assert.deepEqual(invoked.body.echo, { after: 'east' });
  });
});
