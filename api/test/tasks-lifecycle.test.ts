// Every path of a task's life on a real agent running the sample local/task-progress through the
// process runtime: success with progress and results, failure with its last log lines, cancel while
// queued and while running, the runtime limit (SIGTERM, then a kill after the grace period), the queued
// limit. Durations are short (tenths of seconds) and nothing asserts wall-clock times.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { eventsOf, hasStatus, TASK_KEY_SCOPES, taskBody, waitForTask } from './compute/tasks-fixtures.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { postgresAvailable } from './helpers/databases.ts';
import { request } from './helpers/http.ts';

describe('task lifecycle on the local agent', () => {
  let svc: TestPlatform;
  let key: string;

  before(async () => {
    svc = await startTestPlatform({ config: { tasks: { schedulerIntervalMs: 100 } } });
    key = await svc.apiKey(await svc.token(), TASK_KEY_SCOPES, { task: true });
  });
  after(() => svc.close());

  test('success: QUEUED → LAUNCHED → RUNNING → COMPLETED, progress reaches 100, results listed and downloadable', async () => {
    const launched = await svc.api('POST', '/v1/svct/tasks', { bearer: key, body: taskBody({ name: 'ok' }) });
    assert.equal(launched.status, 200, launched.text);
    assert.equal(launched.body.task.status, 'QUEUED');
    const id = launched.body.task.id;
    const done = await waitForTask(svc.api, key, id, hasStatus('COMPLETED', 'ERRORED'));
    assert.equal(done.status, 'COMPLETED', JSON.stringify(done));
    assert.equal(done.percentComplete, 100);
    assert.ok(done.lastHeartbeatAt);
    assert.equal(done.instances[0].instanceState, 'TERMINATED');
    assert.equal(done.healthInfo.gpu, 'LOCAL');
    assert.deepEqual(await eventsOf(svc.api, key, id), [
      "Task created with status 'QUEUED': waiting for GPU 'LOCAL', instance type 'LOCAL.CPU_1x'",
      "Changing status from 'QUEUED' to 'LAUNCHED'",
      "Changing status from 'LAUNCHED' to 'RUNNING'",
      "Changing status from 'RUNNING' to 'COMPLETED'",
    ]);

    const results = await svc.api('GET', `/v1/svct/tasks/${id}/results`, { bearer: key });
    assert.equal(results.status, 200);
    const names = results.body.results.map((result: { name: string }) => result.name).sort();
    assert.deepEqual(names, ['result.txt', 'steps/log.csv']);
    const text = results.body.results.find((result: { name: string }) => result.name === 'result.txt');
    assert.equal(text.size, 'counted to 3 of 3\n'.length);
    assert.equal(text.metadata.size, text.size);
    assert.match(text.metadata.sha256, /^[0-9a-f]{64}$/);
    const download = await request(svc.url, 'GET', text.downloadUrl, { host: 'api.localhost', bearer: key });
    assert.equal(download.status, 200);
    assert.equal(download.text, 'counted to 3 of 3\n');
    assert.equal(download.headers['content-type'], 'application/octet-stream');
    const anonymous = await request(svc.url, 'GET', text.downloadUrl, { host: 'api.localhost' });
    assert.equal(anonymous.status, 401);
  });

  test('failure: a non-zero exit is ERRORED with the exit code and the last lines of output, secrets redacted', async () => {
    const planted = 'planted-secret-3f9a1c';
    const launched = await svc.api('POST', '/v1/svct/tasks', {
      bearer: key,
      body: taskBody({ name: 'fails', secrets: [{ name: 'API_TOKEN', value: planted }] }, { TASK_EXIT_CODE: '3', TASK_ECHO_ENV: 'API_TOKEN' }),
    });
    assert.equal(launched.status, 200);
    assert.deepEqual(launched.body.task.secrets, ['API_TOKEN']);
    const id = launched.body.task.id;
    const done = await waitForTask(svc.api, key, id, hasStatus('COMPLETED', 'ERRORED'));
    assert.equal(done.status, 'ERRORED');
    assert.equal(done.healthInfo.error, 'exited with code 3');
    const events = await eventsOf(svc.api, key, id);
    assert.ok(events.includes("Changing status from 'RUNNING' to 'ERRORED' with error 'exited with code 3'"), events.join('\n'));
    const tail = events.find((message) => message.startsWith('Last lines of output:'));
    assert.ok(tail, 'an event with the last lines');
    assert.match(tail, /failing on purpose with exit code 3/);
    assert.match(tail, /API_TOKEN=\[redacted\]/);
    // The secret's value is in no response, event or log line; its name is.
    const everything = [JSON.stringify(done), events.join('\n'), ...svc.logs].join('\n');
    assert.ok(!everything.includes(planted), 'the planted secret leaked');
    // Results written before the failure are kept.
    const results = await svc.api('GET', `/v1/svct/tasks/${id}/results`, { bearer: key });
    assert.equal(results.body.results.length, 2);
  });

  test('cancel while running: CANCELED at once, the process is stopped and nothing is uploaded', async () => {
    const launched = await svc.api('POST', '/v1/svct/tasks', { bearer: key, body: taskBody({ name: 'long' }, { TASK_STEPS: '1000', TASK_STEP_MS: '50' }) });
    const id = launched.body.task.id;
    await waitForTask(svc.api, key, id, (task) => task.status === 'RUNNING' && task.percentComplete !== undefined);
    const canceled = await svc.api('POST', `/v1/svct/tasks/${id}/cancel`, { bearer: key });
    assert.equal(canceled.status, 200);
    assert.equal(canceled.body.task.status, 'CANCELED');
    const stopped = await waitForTask(svc.api, key, id, (task) => task.instances[0].instanceState === 'TERMINATED');
    assert.equal(stopped.status, 'CANCELED');
    assert.ok(stopped.percentComplete < 100);
    const events = await eventsOf(svc.api, key, id);
    assert.equal(events.at(-1), "Changing status from 'RUNNING' to 'CANCELED'");
    assert.deepEqual((await svc.api('GET', `/v1/svct/tasks/${id}/results`, { bearer: key })).body.results, []);
    const again = await svc.api('POST', `/v1/svct/tasks/${id}/cancel`, { bearer: key });
    assert.equal(again.status, 400);
    assert.equal(again.body.detail, "Invalid request: Cannot cancel a Task with 'CANCELED' terminal status");
  });

  test('maxRuntimeDuration: SIGTERM, and a kill after terminationGracePeriodDuration when it is ignored', async () => {
    // The limit leaves the task's Node.js time to start and install its SIGTERM handler even on a loaded
    // machine (at 0.5 s a slow start was sometimes killed by the SIGTERM itself).
    const [ignoring, honouring] = await Promise.all([
      svc.api('POST', '/v1/svct/tasks', {
        bearer: key, body: taskBody({ name: 'stubborn', maxRuntimeDuration: 'PT2S', terminationGracePeriodDuration: 'PT0.3S' },
          { TASK_STEPS: '1000', TASK_STEP_MS: '50', TASK_IGNORE_SIGTERM: '1' }),
      }),
      svc.api('POST', '/v1/svct/tasks', {
        bearer: key, body: taskBody({ name: 'polite', maxRuntimeDuration: 'PT2S', terminationGracePeriodDuration: 'PT0.3S' },
          { TASK_STEPS: '1000', TASK_STEP_MS: '50' }),
      }),
    ]);
    const killed = await waitForTask(svc.api, key, ignoring.body.task.id, hasStatus('EXCEEDED_MAX_RUNTIME_DURATION', 'COMPLETED', 'ERRORED'));
    assert.equal(killed.status, 'EXCEEDED_MAX_RUNTIME_DURATION');
    assert.match(killed.healthInfo.error, /ran longer than maxRuntimeDuration \(2000 ms\); killed by SIGKILL/);
    const tail = (await eventsOf(svc.api, key, killed.id)).find((message) => message.startsWith('Last lines of output:'));
    assert.match(tail ?? '', /SIGTERM received; ignoring it/);

    const stopped = await waitForTask(svc.api, key, honouring.body.task.id, hasStatus('EXCEEDED_MAX_RUNTIME_DURATION', 'COMPLETED', 'ERRORED'));
    assert.equal(stopped.status, 'EXCEEDED_MAX_RUNTIME_DURATION');
    assert.match(stopped.healthInfo.error, /exited with code 143/);
    // What it wrote on SIGTERM is kept.
    const results = (await svc.api('GET', `/v1/svct/tasks/${stopped.id}/results`, { bearer: key })).body.results;
    const text = results.find((result: { name: string }) => result.name === 'result.txt');
    assert.match((await request(svc.url, 'GET', text.downloadUrl, { host: 'api.localhost', bearer: key })).text, /stopped early/);
  });

  describe('on a cluster whose agent is not connected', () => {
    let token: string;
    before(async () => {
      token = await svc.token();
      const registered = await svc.api('POST', '/v1/accounts/svc-default/clusters', {
        bearer: token, body: { clusterName: 'offline', clusterGroupName: 'offline-group', gpus: [{ name: 'OFFLINE', instanceTypes: [{ name: 'OFFLINE_1x' }] }] },
      });
      assert.equal(registered.status, 200);
    });
    const offline = { gpu: 'OFFLINE', instanceType: 'OFFLINE_1x' };

    test('a task stays QUEUED and can be canceled there', async () => {
      const launched = await svc.api('POST', '/v1/svct/tasks', { bearer: key, body: taskBody({ name: 'waits', gpuSpecification: offline }) });
      assert.equal(launched.status, 200);
      const id = launched.body.task.id;
      const canceled = await svc.api('POST', `/v1/svct/tasks/${id}/cancel`, { bearer: key });
      assert.equal(canceled.body.task.status, 'CANCELED');
      assert.deepEqual(canceled.body.task.instances, []);
      assert.equal((await eventsOf(svc.api, key, id)).at(-1), "Changing status from 'QUEUED' to 'CANCELED'");
    });

    test('past maxQueuedDuration it is EXCEEDED_MAX_QUEUED_DURATION', async () => {
      const launched = await svc.api('POST', '/v1/svct/tasks', { bearer: key, body: taskBody({ name: 'expires', gpuSpecification: offline, maxQueuedDuration: 'PT0.3S' }) });
      const done = await waitForTask(svc.api, key, launched.body.task.id, hasStatus('EXCEEDED_MAX_QUEUED_DURATION'));
      assert.equal(done.healthInfo.error, 'not scheduled within maxQueuedDuration PT0.3S');
      assert.equal((await eventsOf(svc.api, key, done.id)).at(-1),
        "Changing status from 'QUEUED' to 'EXCEEDED_MAX_QUEUED_DURATION' with error 'not scheduled within maxQueuedDuration PT0.3S'");
    });
  });
});

describe('task lifecycle on PostgreSQL', async () => {
  const available = await postgresAvailable();
  test('a task runs to COMPLETED with its events, progress and results', { skip: !available && 'PostgreSQL is not reachable' }, async () => {
    const svc = await startTestPlatform({ backend: 'postgres', config: { tasks: { schedulerIntervalMs: 100 } } });
    try {
      const key = await svc.apiKey(await svc.token(), TASK_KEY_SCOPES, { task: true });
      const launched = await svc.api('POST', '/v1/svct/tasks', { bearer: key, body: taskBody({ name: 'pg' }) });
      const done = await waitForTask(svc.api, key, launched.body.task.id, hasStatus('COMPLETED', 'ERRORED'));
      assert.equal(done.status, 'COMPLETED');
      assert.equal(done.percentComplete, 100);
      assert.equal((await eventsOf(svc.api, key, done.id)).length, 4);
      const results = (await svc.api('GET', `/v1/svct/tasks/${done.id}/results`, { bearer: key })).body.results;
      assert.deepEqual(results.map((result: { size: number }) => typeof result.size), ['number', 'number']);
      const listed = await svc.api('GET', '/v1/svct/tasks?status=COMPLETED', { bearer: key });
      assert.deepEqual(listed.body.tasks.map((task: { id: string }) => task.id), [done.id]);
    } finally {
      await svc.close();
    }
  });
});
