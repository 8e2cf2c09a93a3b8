// The scope matrix of the task endpoints (spec 5.2, 5.3 rule 4): every task endpoint × every credential
// type. Only task keys are accepted, each endpoint needing its own scope; SVC_TOKEN and SVC_API_KEY are
// refused with 403 even when they carry the scope; no credential is a 401. Expectations are written out
// from the spec, not derived from the routes' declarations.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TASK_KEY_SCOPES, taskBody } from './compute/tasks-fixtures.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { MANAGEMENT_SCOPES } from './helpers/platform.ts';

type Credential = 'none' | 'taskKey' | 'token' | 'apiKey' | 'tokenWithTaskScopes' | 'apiKeyWithTaskScopes' | 'narrowTaskKey' | 'admin';

interface Row {
  method: string;
  /** {task} is a fresh task of its own per call (so deletes and cancels always have one); {result} one of its results. */
  path: string;
  scope: string;
  body?: unknown;
  /** What a task key carrying the scope gets. */
  allowed: number;
}

const rows: Row[] = [
  { method: 'POST', path: '/v1/svct/tasks', scope: 'launch_task', body: taskBody({ name: 'matrix' }), allowed: 200 },
  { method: 'GET', path: '/v1/svct/tasks', scope: 'list_tasks', allowed: 200 },
  { method: 'POST', path: '/v1/svct/tasks/bulk', scope: 'list_tasks', body: { taskIds: ['{task}'] }, allowed: 200 },
  { method: 'GET', path: '/v1/svct/tasks/{task}', scope: 'task_details', allowed: 200 },
  { method: 'DELETE', path: '/v1/svct/tasks/{task}', scope: 'delete_task', allowed: 204 },
  { method: 'POST', path: '/v1/svct/tasks/{task}/cancel', scope: 'cancel_task', allowed: 200 },
  { method: 'GET', path: '/v1/svct/tasks/{task}/events', scope: 'list_events', allowed: 200 },
  { method: 'GET', path: '/v1/svct/tasks/{task}/results', scope: 'list_results', allowed: 200 },
  { method: 'GET', path: '/v1/svct/tasks/{done}/results/{result}/content', scope: 'list_results', allowed: 200 },
  { method: 'PUT', path: '/v1/svct/secrets/tasks/{task}', scope: 'update_secrets', body: { secrets: [{ name: 'S', value: 'v' }] }, allowed: 204 },
];

describe('task scope matrix', () => {
  let svc: TestPlatform;
  let taskKey: string;
  let done: { id: string; resultId: string };
  const bearers = {} as Record<Credential, string | undefined>;

  before(async () => {
    svc = await startTestPlatform({ config: { api: { accountBootstrap: { limits: { maxTasks: 10_000 } } } } });
    const token = await svc.token();
    taskKey = await svc.apiKey(token, TASK_KEY_SCOPES, { task: true });
    Object.assign(bearers, {
      none: undefined,
      taskKey,
      token,
      apiKey: await svc.apiKey(token, ['invoke_function', 'list_functions', 'queue_details', 'list_functions_details']),
      // Rule 4: the scope alone is not enough without the task key type.
      tokenWithTaskScopes: await svc.token({ scopes: [...MANAGEMENT_SCOPES, ...TASK_KEY_SCOPES.filter((scope) => scope !== 'update_secrets')] }),
      apiKeyWithTaskScopes: await svc.apiKey(token, TASK_KEY_SCOPES),
      // A task key without the endpoint's scope.
      narrowTaskKey: await svc.apiKey(token, ['launch_task'], { task: true }),
      admin: await svc.adminToken(),
    });
    // A finished task with a result, for the download row.
    const launched = await svc.api('POST', '/v1/svct/tasks', { bearer: taskKey, body: taskBody({ name: 'source' }, { TASK_STEPS: '1', TASK_STEP_MS: '0' }) });
    for (;;) {
      const results = await svc.api('GET', `/v1/svct/tasks/${launched.body.task.id}/results`, { bearer: taskKey });
      const task = await svc.api('GET', `/v1/svct/tasks/${launched.body.task.id}`, { bearer: taskKey });
      if (task.body.task.status === 'COMPLETED' && results.body.results.length) {
        done = { id: launched.body.task.id, resultId: results.body.results[0].resultId };
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  });
  after(() => svc.close());

  test('every task endpoint answers each credential type as the spec says', async () => {
    const failures: string[] = [];
    for (const credential of Object.keys(bearers) as Credential[]) {
      for (const row of rows) {
        // Tasks that wait (a GPU nobody offers is refused, so: a long count on the local cluster).
        const task = row.path.includes('{task}') || JSON.stringify(row.body ?? '').includes('{task}')
          ? (await svc.api('POST', '/v1/svct/tasks', { bearer: taskKey, body: taskBody({ name: 'subject' }, { TASK_STEPS: '1000' }) })).body.task.id : '';
        const fill = (text: string) => text.replace('{task}', task).replace('{done}', done.id).replace('{result}', done.resultId);
        const body = row.body === undefined ? undefined : JSON.parse(fill(JSON.stringify(row.body)));
        const response = await svc.api(row.method, fill(row.path), { bearer: bearers[credential], body });
        const expected = credential === 'none' ? 401 : credential === 'taskKey' ? row.allowed
          : credential === 'narrowTaskKey' && row.scope === 'launch_task' ? row.allowed : 403;
        if (response.status !== expected) failures.push(`${credential} ${row.method} ${row.path}: ${response.status}, expected ${expected}`);
        if (response.status === 401) assert.equal(response.headers['www-authenticate'], 'Bearer');
        if (response.status === 403) {
          assert.match(response.body.detail, credential === 'narrowTaskKey' ? new RegExp(`lacks scope '${row.scope}'`) : /accepts SVC_TASK_API_KEY/);
        }
        if (task) await svc.api('POST', `/v1/svct/tasks/${task}/cancel`, { bearer: taskKey });
      }
    }
    assert.deepEqual(failures, []);
  });
});
