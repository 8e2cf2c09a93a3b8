// Tasks across restarts: a restart of the control plane keeps every task in the state it was (queued ones
// are still queued, finished ones keep their events and results), a remote agent keeps running its task
// through it and the control plane picks the task up again from the agent's hello; an agent that
// restarted and lost its task gets it ERRORED with an event saying so.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { tempDir } from './helpers/databases.ts';
import { eventsOf, hasStatus, TASK_KEY_SCOPES, taskBody, waitForTask } from './compute/tasks-fixtures.ts';
import { SAMPLES_CATALOG } from './compute/helpers.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

const svcBin = path.resolve(import.meta.dirname, '../bin/svc.js');

describe('tasks across restarts', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let credential: string;
  const agents: ChildProcess[] = [];
  const agentState = tempDir();

  function startAgent(): ChildProcess {
    const agent = spawn(process.execPath, [svcBin, 'agent'], {
      env: {
        ...process.env, SVC_AGENT_SERVER: svc.url, SVC_AGENT_CREDENTIAL: credential, SVC_AGENT_STATE_DIR: agentState,
        SVC_AGENT_IMAGE_CATALOG: SAMPLES_CATALOG, SVC_AGENT_UDP_PORT_RANGE: '48400-48499', SVC_LOG_LEVEL: 'warn', SVC_DATA_DIR: agentState,
        SVC_AGENT_TASK_PROGRESS_INTERVAL_MS: '100',
      },
      stdio: 'ignore',
    });
    agents.push(agent);
    return agent;
  }

  async function stop(agent: ChildProcess, signal: NodeJS.Signals) {
    if (agent.exitCode !== null || agent.signalCode !== null) return;
    const exited = new Promise((resolve) => agent.once('exit', resolve));
    agent.kill(signal);
    await exited;
  }

  before(async () => {
    svc = await startTestPlatform({ config: { tasks: { schedulerIntervalMs: 100 } } });
    token = await svc.token();
    key = await svc.apiKey(token, TASK_KEY_SCOPES, { task: true });
    const registered = await svc.api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token, body: { clusterName: 'remote', clusterGroupName: 'remote-group', gpus: [{ name: 'REMOTE', capacity: 2, instanceTypes: [{ name: 'REMOTE_1x' }] }] },
    });
    credential = registered.body.agentCredential;
    await svc.api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token, body: { clusterName: 'offline', clusterGroupName: 'offline-group', gpus: [{ name: 'OFFLINE', instanceTypes: [{ name: 'OFFLINE_1x' }] }] },
    });
  });
  after(async () => {
    for (const agent of agents) await stop(agent, 'SIGTERM');
    await svc.close();
  });

  const remote = { gpu: 'REMOTE', instanceType: 'REMOTE_1x' };

  test('a control-plane restart keeps queued, finished and running tasks as they were; the remote agent resyncs', async () => {
    startAgent();
    const queued = (await svc.api('POST', '/v1/svct/tasks', { bearer: key, body: taskBody({ name: 'queued', gpuSpecification: { gpu: 'OFFLINE', instanceType: 'OFFLINE_1x' } }) })).body.task;
    const finished = (await svc.api('POST', '/v1/svct/tasks', { bearer: key, body: taskBody({ name: 'finished' }) })).body.task;
    await waitForTask(svc.api, key, finished.id, hasStatus('COMPLETED'));
    const running = (await svc.api('POST', '/v1/svct/tasks', {
      bearer: key, body: taskBody({ name: 'remote-run', gpuSpecification: remote }, { TASK_STEPS: '60', TASK_STEP_MS: '50' }),
    })).body.task;
    const before = await waitForTask(svc.api, key, running.id, (task) => task.status === 'RUNNING' && task.percentComplete > 0);
    assert.equal(before.instances[0].location, 'remote');

    await svc.restart({ gateway: { port: svc.platform.port } });

    assert.equal((await svc.api('GET', `/v1/svct/tasks/${queued.id}`, { bearer: key })).body.task.status, 'QUEUED');
    const kept = await svc.api('GET', `/v1/svct/tasks/${finished.id}`, { bearer: key });
    assert.equal(kept.body.task.status, 'COMPLETED');
    assert.equal((await svc.api('GET', `/v1/svct/tasks/${finished.id}/results`, { bearer: key })).body.results.length, 2);
    const done = await waitForTask(svc.api, key, running.id, hasStatus('COMPLETED', 'ERRORED'));
    assert.equal(done.status, 'COMPLETED', JSON.stringify(done));
    assert.equal(done.percentComplete, 100);
    assert.equal(done.instances[0].instanceId, before.instances[0].instanceId, 'the same instance, not a second run');
    const events = await eventsOf(svc.api, key, running.id);
    assert.equal(events.filter((message) => message.includes("to 'RUNNING'")).length, 1);
    assert.equal(events.at(-1), "Changing status from 'RUNNING' to 'COMPLETED'");
    const results = (await svc.api('GET', `/v1/svct/tasks/${running.id}/results`, { bearer: key })).body.results;
    assert.deepEqual(results.map((result: { name: string }) => result.name).sort(), ['result.txt', 'steps/log.csv']);
  });

  test('an agent that restarted and lost its task: the task is ERRORED with an event saying so', async () => {
    const running = (await svc.api('POST', '/v1/svct/tasks', {
      bearer: key, body: taskBody({ name: 'lost', gpuSpecification: remote }, { TASK_STEPS: '1000', TASK_STEP_MS: '50' }),
    })).body.task;
    await waitForTask(svc.api, key, running.id, (task) => task.status === 'RUNNING');
    for (const agent of agents) await stop(agent, 'SIGKILL');
    startAgent();
    const lost = await waitForTask(svc.api, key, running.id, hasStatus('ERRORED', 'COMPLETED'));
    assert.equal(lost.status, 'ERRORED');
    assert.equal(lost.healthInfo.error, "the agent of cluster 'remote' no longer runs this task (the agent restarted)");
    assert.equal((await eventsOf(svc.api, key, running.id)).at(-1),
      "Changing status from 'RUNNING' to 'ERRORED' with error 'the agent of cluster 'remote' no longer runs this task (the agent restarted)'");
    // The new agent takes new tasks.
    const next = (await svc.api('POST', '/v1/svct/tasks', { bearer: key, body: taskBody({ name: 'after', gpuSpecification: remote }) })).body.task;
    assert.equal((await waitForTask(svc.api, key, next.id, hasStatus('COMPLETED', 'ERRORED'))).status, 'COMPLETED');
  });
});
