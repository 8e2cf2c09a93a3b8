// Request bodies and waits shared by the task tests (api/test/tasks*.test.ts) and bench/tasks.
import { setTimeout as sleep } from 'node:timers/promises';
import type { TestResponse } from '../helpers/http.ts';

export const TASK_KEY_SCOPES = ['launch_task', 'list_tasks', 'task_details', 'cancel_task', 'delete_task', 'list_events', 'list_results', 'update_secrets'];

/** A task of the sample local/task-progress on the local cluster; `env` sets its knobs (TASK_STEPS, ...). */
export function taskBody(overrides: Record<string, unknown> = {}, env: Record<string, string> = {}) {
  return {
    name: 'count',
    gpuSpecification: { gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x' },
    containerImage: 'local/task-progress:1',
    containerEnvironment: Object.entries({ TASK_STEPS: '3', TASK_STEP_MS: '50', ...env }).map(([key, value]) => ({ key, value })),
    terminationGracePeriodDuration: 'PT1S',
    ...overrides,
  };
}

type Api = (method: string, path: string, options?: { bearer?: string; body?: unknown }) => Promise<TestResponse>;

/** Polls GET /v1/svct/tasks/{id} until `done(task)` holds; throws with the last task after `timeoutMs`. */
export async function waitForTask(api: Api, key: string, id: string, done: (task: any) => boolean, timeoutMs = 20_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  let task: any;
  for (;;) {
    const response = await api('GET', `/v1/svct/tasks/${id}`, { bearer: key });
    task = response.body?.task;
    if (task && done(task)) return task;
    if (Date.now() > deadline) throw new Error(`task ${id} did not get there in time: ${JSON.stringify(task ?? response.body)}`);
    await sleep(50);
  }
}

export const hasStatus = (...statuses: string[]) => (task: { status: string }) => statuses.includes(task.status);

export async function eventsOf(api: Api, key: string, id: string): Promise<string[]> {
  const response = await api('GET', `/v1/svct/tasks/${id}/events?limit=100`, { bearer: key });
  return response.body.events.map((event: { message: string }) => event.message);
}
