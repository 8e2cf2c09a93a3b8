// bench/tasks: 1,000 short tasks (the sample local/task-progress counting one step) launched at once on
// the embedded local cluster, through the process runtime: launch → COMPLETED latency (p50/p99, from each
// task's createdAt to the time of its COMPLETED transition, both on the platform's clock), and the p99 of
// GET /v1/svct/tasks (one default page of 10) while they run next to the same at rest (the same 1,000 rows,
// nothing running). The platform runs in its own process (`svc serve`).
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from '../../api/test/helpers/http.ts';
import { servePlatform } from '../../api/test/helpers/served.ts';
import { percentile, printTable } from '../lib/report.ts';

const TASKS = Number(process.env.BENCH_TASKS ?? 1000);
/** Tasks the local cluster runs at once (its LOCAL GPU capacity; the embedded default is 8). */
const CAPACITY = Number(process.env.BENCH_CAPACITY ?? 8);
/** UPLOAD also uploads the task's two result files; NONE measures the queue and the runner alone. */
const RESULTS = process.env.BENCH_RESULTS ?? 'NONE';
const REST_SAMPLES = Number(process.env.BENCH_SAMPLES ?? 500);
const TASK_SCOPES = ['launch_task', 'list_tasks', 'task_details', 'cancel_task', 'delete_task', 'list_events', 'list_results', 'update_secrets'];

const dataDir = mkdtempSync(path.join(os.tmpdir(), 'svc-bench-tasks-'));
// The local cluster's offer, with the capacity asked for.
const configFile = path.join(dataDir, 'config.yaml');
writeFileSync(configFile, `tasks:\n  schedulerIntervalMs: 200\ncompute:\n  localCluster:\n    gpus:\n      - name: LOCAL\n        capacity: ${CAPACITY}\n        instanceTypes:\n          - { name: LOCAL.CPU_1x, default: true }\n`);
const platform = await servePlatform({
  SVC_LOG_LEVEL: 'warn', SVC_ACCOUNT_MAX_TASKS: String(TASKS * 10), SVC_CONFIG: configFile, NODE_NO_WARNINGS: '1',
  SVC_AGENT_TASK_PROGRESS_INTERVAL_MS: '200', SVC_DATA_DIR: dataDir,
});
const { url, bootstrapSecret } = platform;

try {
  const api = (method: string, target: string, options: { bearer?: string; body?: unknown; headers?: Record<string, string> } = {}) =>
    request(url, method, target, { host: 'api.localhost', ...options });
  const token = (await request(url, 'POST', '/v1/admin/keys', { host: 'api-keys.localhost', bearer: bootstrapSecret, body: {} })).body.value;
  const key = (await request(url, 'POST', '/v1/keys', {
    host: 'api-keys.localhost', bearer: token,
    headers: { 'key-issuer-service': 'svct-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'bench' },
    body: { expires_at: new Date(Date.now() + 86_400_000).toISOString(), authorizations: { policies: [{ product: 'svc-cloud-tasks', scopes: TASK_SCOPES }] } },
  })).body.value;
  const groups = (await api('GET', '/v2/svc/clusterGroups', { bearer: token })).body.clusterGroups;
  const capacity = groups[0]?.gpus?.[0];
  const body = (i: number) => ({
    name: `bench-${i}`, gpuSpecification: { gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x' }, containerImage: 'local/task-progress:1',
    containerEnvironment: [{ key: 'TASK_STEPS', value: '1' }, { key: 'TASK_STEP_MS', value: '0' }],
    resultHandlingStrategy: RESULTS, terminationGracePeriodDuration: 'PT10S',
  });
  // Warm-up: one task through, so the first of the thousand does not pay for cold caches.
  const warm = (await api('POST', '/v1/svct/tasks', { bearer: key, body: body(-1) })).body.task.id;
  while ((await api('GET', `/v1/svct/tasks/${warm}`, { bearer: key })).body.task.status !== 'COMPLETED') await sleep(50);

  const listOnce = async () => {
    const started = performance.now();
    const response = await api('GET', '/v1/svct/tasks', { bearer: key });
    if (response.status !== 200) throw new Error(`list: ${response.status}`);
    return performance.now() - started;
  };

  const launchStarted = performance.now();
  const launched = await Promise.all(Array.from({ length: TASKS }, (_, i) => api('POST', '/v1/svct/tasks', { bearer: key, body: body(i) })));
  const launchMs = performance.now() - launchStarted;
  const failed = launched.filter((response) => response.status !== 200);
  if (failed.length) throw new Error(`${failed.length} launches failed, e.g. ${failed[0].status} ${failed[0].text}`);
  const ids = launched.map((response) => response.body.task.id as string);

  // While they run: list pages back to back; every second, check how many have ended.
  const running: number[] = [];
  let ended = 0;
  let lastCheck = 0;
  while (ended < TASKS) {
    running.push(await listOnce());
    if (performance.now() - lastCheck > 1000) {
      lastCheck = performance.now();
      const bulk = await api('POST', '/v1/svct/tasks/bulk', { bearer: key, body: { taskIds: ids } });
      ended = bulk.body.tasks.filter((task: { status: string }) => !['QUEUED', 'LAUNCHED', 'RUNNING'].includes(task.status)).length;
    }
  }
  const wallMs = performance.now() - launchStarted;
  const rest: number[] = [];
  for (let i = 0; i < REST_SAMPLES; i++) rest.push(await listOnce());

  const tasks = (await api('GET', '/v1/svct/tasks?limit=1000&status=COMPLETED', { bearer: key })).body.tasks as { id: string; createdAt: string; lastUpdatedAt: string }[];
  const mine = new Set(ids);
  const latencies = tasks.filter((task) => mine.has(task.id)).map((task) => Date.parse(task.lastUpdatedAt) - Date.parse(task.createdAt)).sort((a, b) => a - b);
  const completed = latencies.length;
  running.sort((a, b) => a - b);
  rest.sort((a, b) => a - b);

  printTable(`bench/tasks: ${TASKS} tasks launched at once, local cluster capacity ${capacity ? CAPACITY : '?'}, results ${RESULTS}, ${os.cpus().length} cores`, ['measure', 'p50 ms', 'p99 ms', 'note'], [
    ['launch → COMPLETED', percentile(latencies, 50), percentile(latencies, 99), `${completed}/${TASKS} COMPLETED; all ${TASKS} launches answered in ${Math.round(launchMs)} ms; last ended after ${(wallMs / 1000).toFixed(1)} s`],
    ['list tasks, while running', percentile(running, 50), percentile(running, 99), `${running.length} sequential GET /v1/svct/tasks`],
    ['list tasks, at rest', percentile(rest, 50), percentile(rest, 99), `${rest.length} samples, same ${TASKS + 1} rows`],
    ['ratio running / rest', percentile(running, 50) / percentile(rest, 50), percentile(running, 99) / percentile(rest, 99), ''],
  ]);
  if (completed !== TASKS) process.exitCode = 1;
} finally {
  await platform.stop();
}
