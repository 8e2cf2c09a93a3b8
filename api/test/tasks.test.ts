// The task API (spec 4.4; wire-reference 7): validation naming the field at fault, the quota, listing
// pages and the status filter, bulk, isolation between accounts, delete, secrets, and the agents' upload
// endpoint refusing what is not an agent of the task's cluster.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { hasStatus, TASK_KEY_SCOPES, taskBody, waitForTask } from './compute/tasks-fixtures.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { request } from './helpers/http.ts';

const offline = { gpu: 'OFFLINE', instanceType: 'OFFLINE_1x' };

describe('task API', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let agentCredential: string;

  before(async () => {
    svc = await startTestPlatform({ config: { tasks: { schedulerIntervalMs: 100 } } });
    token = await svc.token();
    key = await svc.apiKey(token, TASK_KEY_SCOPES, { task: true });
    // A cluster whose agent never connects: its tasks stay QUEUED.
    const registered = await svc.api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token, body: { clusterName: 'offline', clusterGroupName: 'offline-group', gpus: [{ name: 'OFFLINE', instanceTypes: [{ name: 'OFFLINE_1x' }] }] },
    });
    agentCredential = registered.body.agentCredential;
  });
  after(() => svc.close());

  const launch = (body: unknown, bearer = key) => svc.api('POST', '/v1/svct/tasks', { bearer, body });

  test('a bad body is a 400 naming each field at fault', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ name: undefined }, 'name'],
      [{ name: '-bad' }, 'name'],
      [{ gpuSpecification: { gpu: 'LOCAL' } }, 'gpuSpecification.instanceType'],
      [{ containerEnvironment: [{ key: 'BAD-KEY', value: 'x' }] }, 'containerEnvironment.0.key'],
      [{ maxRuntimeDuration: 'two hours' }, 'maxRuntimeDuration'],
      [{ maxQueuedDuration: 'PT0S' }, 'maxQueuedDuration'],
      [{ maxRuntimeDuration: 'PT1M', terminationGracePeriodDuration: 'PT2M' }, 'terminationGracePeriodDuration'],
      [{ resultHandlingStrategy: 'KEEP' }, 'resultHandlingStrategy'],
      [{ resultsLocation: '/abs/path' }, 'resultsLocation'],
      [{ containerImage: undefined }, 'containerImage'],
      [{ helmChart: 'https://charts.example/x.tgz', containerImage: undefined }, 'helmChart'],
      [{ secrets: [{ name: 'A', value: '1' }, { name: 'A', value: '2' }] }, 'secrets.1.name'],
      [{ gpuSpecification: { gpu: 'H100', instanceType: 'GPU.H100_1x' } }, 'gpuSpecification.gpu'],
      [{ gpuSpecification: { gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', clusters: ['nowhere'] } }, 'gpuSpecification.clusters'],
      [{ gpuSpecification: { gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', configuration: { a: 1 } } }, 'gpuSpecification.configuration'],
    ];
    for (const [change, field] of cases) {
      const response = await launch({ ...taskBody(), ...change });
      assert.equal(response.status, 400, `${field}: ${response.text}`);
      assert.ok(response.body.errors.some((error: { field: string }) => error.field === field), `${field}: ${JSON.stringify(response.body.errors)}`);
      assert.match(response.body.detail, new RegExp(field.replaceAll('.', '\\.')));
    }
    const notJson = await svc.api('POST', '/v1/svct/tasks', { bearer: key, body: '{"name":', headers: { 'content-type': 'application/json' } });
    assert.equal(notJson.status, 400);
    const queries: [string, string][] = [
      ['/v1/svct/tasks?limit=0', 'query limit'], ['/v1/svct/tasks?status=SLEEPING', 'query status'], ['/v1/svct/tasks?cursor=nope', 'query cursor'],
      ['/v1/svct/tasks/not-a-uuid', 'path taskId'], ['/v1/svct/tasks/not-a-uuid/events', 'path taskId'],
    ];
    for (const [url, field] of queries) {
      const response = await svc.api('GET', url, { bearer: key });
      assert.equal(response.status, 400, url);
      assert.equal(response.body.errors[0].field, field, url);
    }
    const bulk = await svc.api('POST', '/v1/svct/tasks/bulk', { bearer: key, body: { taskIds: ['nope'] } });
    assert.equal(bulk.body.errors[0].field, 'taskIds.0');
  });

  test('defaults are explicit in the answer; nulls are omitted', async () => {
    const { body: { task } } = await launch(taskBody({ name: 'defaults', gpuSpecification: offline, terminationGracePeriodDuration: undefined }));
    assert.equal(task.maxQueuedDuration, 'PT72H');
    assert.equal(task.terminationGracePeriodDuration, 'PT1H');
    assert.equal(task.resultHandlingStrategy, 'UPLOAD');
    assert.equal(task.maxRuntimeDuration, undefined);
    const { body: { task: short } } = await launch(taskBody({ name: 'short', gpuSpecification: offline, maxRuntimeDuration: 'PT5M', terminationGracePeriodDuration: undefined }));
    assert.equal(short.terminationGracePeriodDuration, 'PT5M', 'the default grace period is cut to the runtime limit');
    assert.equal(task.percentComplete, undefined);
    assert.deepEqual(task.instances, []);
    assert.deepEqual(task.healthInfo, { gpu: 'OFFLINE', instanceType: 'OFFLINE_1x' });
    assert.ok(!JSON.stringify(task).includes('null'));
  });

  test('listing: pages of 10 by default, newest first, a status filter, and bulk', async () => {
    const account = 'listing-account';
    const admin = await svc.adminToken();
    assert.equal((await svc.api('POST', `/v2/svc/accounts/${account}`, { bearer: admin, body: {} })).status, 200);
    const own = await svc.apiKey(await svc.token({ ncaId: account }), TASK_KEY_SCOPES, { task: true });
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) {
      // Only the local cluster is shared with every account; a long count keeps them in flight.
      const response = await launch(taskBody({ name: `t${i}`, maxQueuedDuration: 'PT0.1S', gpuSpecification: { gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', clusters: ['local'] } },
        { TASK_STEPS: '1', TASK_STEP_MS: '0' }), own);
      assert.equal(response.status, 200, response.text);
      ids.push(response.body.task.id);
    }
    const first = await svc.api('GET', '/v1/svct/tasks', { bearer: own });
    assert.equal(first.body.tasks.length, 10);
    assert.equal(first.body.limit, 10);
    assert.ok(first.body.cursor);
    const second = await svc.api('GET', `/v1/svct/tasks?cursor=${first.body.cursor}`, { bearer: own });
    assert.equal(second.body.tasks.length, 2);
    const listed = [...first.body.tasks, ...second.body.tasks];
    assert.deepEqual(listed.map((task: { id: string }) => task.id).sort(), [...ids].sort());
    const created = listed.map((task: { createdAt: string }) => task.createdAt);
    assert.deepEqual(created, [...created].sort().reverse(), 'newest first');
    assert.equal(second.body.cursor, undefined);
    assert.equal(second.body.limit, undefined);

    for (const id of ids) await waitForTask(svc.api, own, id, hasStatus('COMPLETED', 'ERRORED', 'EXCEEDED_MAX_QUEUED_DURATION'));
    const completed = await svc.api('GET', '/v1/svct/tasks?status=completed&limit=100', { bearer: own });
    assert.ok(completed.body.tasks.every((task: { status: string }) => task.status === 'COMPLETED'));
    const byStatus = new Map<string, number>();
    for (const status of ['COMPLETED', 'EXCEEDED_MAX_QUEUED_DURATION', 'ERRORED']) {
      byStatus.set(status, (await svc.api('GET', `/v1/svct/tasks?status=${status}&limit=100`, { bearer: own })).body.tasks.length);
    }
    assert.equal([...byStatus.values()].reduce((a, b) => a + b), 12);

    const bulk = await svc.api('POST', '/v1/svct/tasks/bulk', { bearer: own, body: { taskIds: [ids[0], ids[1], '00000000-0000-4000-8000-000000000000'] } });
    assert.equal(bulk.status, 200);
    assert.equal(bulk.body.ncaId, account);
    assert.deepEqual(bulk.body.tasks.map((task: { name: string }) => task.name).sort(), ['t0', 't1']);

    // Isolation: the default account's key sees none of them.
    assert.equal((await svc.api('GET', `/v1/svct/tasks/${ids[0]}`, { bearer: key })).status, 404);
    assert.equal((await svc.api('POST', `/v1/svct/tasks/${ids[0]}/cancel`, { bearer: key })).status, 404);
    assert.equal((await svc.api('DELETE', `/v1/svct/tasks/${ids[0]}`, { bearer: key })).status, 404);
    assert.deepEqual((await svc.api('POST', '/v1/svct/tasks/bulk', { bearer: key, body: { taskIds: ids } })).body.tasks, []);
  });

  test('quota: maxTasksAllowed counts tasks in flight, with the reference detail', async () => {
    const account = 'quota-account';
    const admin = await svc.adminToken();
    await svc.api('POST', `/v2/svc/accounts/${account}`, { bearer: admin, body: { maxTasksAllowed: 1 } });
    const own = await svc.apiKey(await svc.token({ ncaId: account }), TASK_KEY_SCOPES, { task: true });
    const body = taskBody({ name: 'q' }, { TASK_STEPS: '1000', TASK_STEP_MS: '50' });
    const first = await launch(body, own);
    assert.equal(first.status, 200);
    const refused = await launch(body, own);
    assert.equal(refused.status, 400);
    assert.equal(refused.body.type, 'urn:svc:problem-details:quota-exceeded');
    assert.equal(refused.body.detail, `Account '${account}': Reached or exceeded the max limit for the number of tasks allowed: 1.`);
    await svc.api('POST', `/v1/svct/tasks/${first.body.task.id}/cancel`, { bearer: own });
    assert.equal((await launch({ ...body, containerEnvironment: [] }, own)).status, 200);
  });

  test('secrets: set and replaced by name, values never returned; delete removes the task, its events and results', async () => {
    const launched = await launch(taskBody({ name: 'secretive', secrets: [{ name: 'A', value: 'value-a-123' }] }));
    const id = launched.body.task.id;
    const put = await svc.api('PUT', `/v1/svct/secrets/tasks/${id}`, { bearer: key, body: { secrets: [{ name: 'B', value: { nested: 'value-b-456' } }, { name: 'A', value: 'value-a-789' }] } });
    assert.equal(put.status, 204);
    const got = await svc.api('GET', `/v1/svct/tasks/${id}?includeSecrets=true`, { bearer: key });
    assert.deepEqual(got.body.task.secrets, ['A', 'B']);
    assert.ok(!/value-[ab]-/.test(got.text));
    assert.equal((await svc.api('PUT', `/v1/svct/secrets/tasks/${id}`, { bearer: key, body: { secrets: [] } })).body.errors[0].field, 'secrets');

    await waitForTask(svc.api, key, id, hasStatus('COMPLETED'));
    const results = await svc.api('GET', `/v1/svct/tasks/${id}/results?limit=1`, { bearer: key });
    assert.equal(results.body.results.length, 1);
    assert.equal(results.body.limit, 1);
    const next = await svc.api('GET', `/v1/svct/tasks/${id}/results?limit=1&cursor=${results.body.cursor}`, { bearer: key });
    assert.equal(next.body.results.length, 1);
    assert.notEqual(next.body.results[0].name, results.body.results[0].name);
    const events = await svc.api('GET', `/v1/svct/tasks/${id}/events?limit=2`, { bearer: key });
    assert.equal(events.body.events.length, 2);
    assert.ok(events.body.cursor);
    const stored = path.join(svc.database.dataDir, 'task-results', 'svc-default', 'tasks', id);
    assert.ok(existsSync(stored));

    assert.equal((await svc.api('DELETE', `/v1/svct/tasks/${id}`, { bearer: key })).status, 204);
    assert.equal((await svc.api('GET', `/v1/svct/tasks/${id}`, { bearer: key })).status, 404);
    assert.equal((await svc.api('GET', `/v1/svct/tasks/${id}/events`, { bearer: key })).status, 404);
    assert.ok(!existsSync(stored), 'result files removed');
    assert.equal((await request(svc.url, 'GET', results.body.results[0].downloadUrl, { host: 'api.localhost', bearer: key })).status, 404);
  });

  test('NONE keeps nothing; resultsLocation names the store prefix', async () => {
    const none = await launch(taskBody({ name: 'none', resultHandlingStrategy: 'none' }));
    assert.equal(none.body.task.resultHandlingStrategy, 'NONE');
    const located = await launch(taskBody({ name: 'located', resultsLocation: 'org/team/run-1' }));
    await waitForTask(svc.api, key, none.body.task.id, hasStatus('COMPLETED'));
    await waitForTask(svc.api, key, located.body.task.id, hasStatus('COMPLETED'));
    assert.deepEqual((await svc.api('GET', `/v1/svct/tasks/${none.body.task.id}/results`, { bearer: key })).body.results, []);
    assert.equal((await svc.api('GET', `/v1/svct/tasks/${located.body.task.id}/results`, { bearer: key })).body.results.length, 2);
    assert.ok(existsSync(path.join(svc.database.dataDir, 'task-results', 'svc-default', 'org', 'team', 'run-1', located.body.task.id, 'result.txt')));
  });

  test('the agents\' upload endpoint takes only the agent of the cluster running the task', async () => {
    const queued = await launch(taskBody({ name: 'upload-target', gpuSpecification: offline }));
    const url = `/v1/agents/tasks/${queued.body.task.id}/results?name=x.txt`;
    const put = (bearer: string | undefined, target = url) => request(svc.url, 'PUT', target, { host: 'api.localhost', bearer, body: 'bytes', headers: { 'content-type': 'application/octet-stream' } });
    assert.equal((await put(undefined)).status, 401);
    assert.equal((await put(key)).status, 401);
    const notRunning = await put(agentCredential);
    assert.equal(notRunning.status, 409);
    assert.match(notRunning.body.detail, /does not run on cluster 'offline'/);
    assert.equal((await put(agentCredential, `/v1/agents/tasks/${queued.body.task.id}/results?name=../x`)).status, 409);
    assert.equal((await put(agentCredential, '/v1/agents/tasks/00000000-0000-4000-8000-000000000000/results?name=x')).status, 404);
  });

  test('/v3/openapi documents every task endpoint with its scope, task keys only', async () => {
    const paths = (await svc.api('GET', '/v3/openapi')).body.paths;
    const expected: [string, string, string][] = [
      ['post', '/v1/svct/tasks', 'launch_task'], ['get', '/v1/svct/tasks', 'list_tasks'], ['post', '/v1/svct/tasks/bulk', 'list_tasks'],
      ['get', '/v1/svct/tasks/{taskId}', 'task_details'], ['delete', '/v1/svct/tasks/{taskId}', 'delete_task'],
      ['post', '/v1/svct/tasks/{taskId}/cancel', 'cancel_task'], ['get', '/v1/svct/tasks/{taskId}/events', 'list_events'],
      ['get', '/v1/svct/tasks/{taskId}/results', 'list_results'], ['get', '/v1/svct/tasks/{taskId}/results/{resultId}/content', 'list_results'],
      ['put', '/v1/svct/secrets/tasks/{taskId}', 'update_secrets'],
    ];
    for (const [method, url, scope] of expected) {
      assert.deepEqual(paths[url]?.[method]?.['x-svc-scopes'], [scope], `${method} ${url}`);
      assert.deepEqual(paths[url][method]['x-svc-credentials'], ['task-key'], `${method} ${url}`);
    }
  });
});
