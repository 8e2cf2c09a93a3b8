// bench/autoscale: (1) a load step from 0 to 50 concurrent requests on one function version (closed loop,
// 250 ms each, maxRequestConcurrency 5, 1-16 instances, platform policy) on the embedded platform with
// real instances: time until the autoscaler's decision, until every desired instance is ready, and until a
// new instance serves its first request; (2) the cost of one scaling round for 1,000 deployed function
// versions (created through the API, min 0 / max 4), on SQLite and, when reachable, PostgreSQL, with
// synthetic load fed to the in-process metrics source (10 % of versions change load each round).
// The platform runs in this process (helpers/autoscaler-platform.ts, as main.ts composes it after the
// autoscaler patch), since `svc serve` does not yet carry the autoscaler.
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { createAutoscalerPlane } from '../../api/src/autoscaler/plane.ts';
import { autoscalerSettingsSchema } from '../../api/src/autoscaler/settings.ts';
import { createMetrics } from '../../api/src/http/metrics.ts';
import { type FunctionInstances, type FunctionLoad } from '../../api/src/domain/load.ts';
import { createLogger } from '../../api/src/logger.ts';
import { openDatabase } from '../../api/src/database.ts';
import { startScalingTestPlatform } from '../../api/test/helpers/autoscaler-platform.ts';
import { backends, createDatabase } from '../../api/test/helpers/databases.ts';
import { localSpec } from '../../api/test/helpers/fixtures.ts';
import { percentile, printTable } from '../lib/report.ts';

const CATALOG = fileURLToPath(new URL('./images.yaml', import.meta.url));
const INTERVAL_MS = Number(process.env.BENCH_SCALING_INTERVAL_MS ?? 1000);
const CONCURRENCY = 50;
const VERSIONS = Number(process.env.BENCH_VERSIONS ?? 1000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 60);
const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 };

async function loadStep() {
  const svc = await startScalingTestPlatform({
    config: {
      log: { level: 'warn' },
      compute: {
        agent: { imageCatalog: CATALOG },
        localCluster: { gpus: [{ name: 'LOCAL', capacity: 20, instanceTypes: [{ name: 'LOCAL.CPU_1x', default: true }] }] },
      },
    },
    autoscaler: { scalingIntervalMs: INTERVAL_MS, discoveryIntervalMs: INTERVAL_MS, discoveryLockDurationSeconds: Math.max(2, (3 * INTERVAL_MS) / 1000) },
  });
  try {
    const token = await svc.token();
    const key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    const created = await svc.api('POST', '/v2/svc/functions', {
      bearer: token, body: { name: 'whoami', inferenceUrl: '/work', inferencePort: 8000, containerImage: 'bench/whoami:1', health },
    });
    const { id, versionId } = created.body.function;
    await svc.api('POST', `/v2/svc/deployments/functions/${id}/versions/${versionId}`, {
      bearer: token, body: { deploymentSpecifications: [localSpec({ minInstances: 1, maxInstances: 16, maxRequestConcurrency: 5 })] },
    });
    const status = async () => (await svc.api('GET', '/v2/svc/autoscaler/functions', { bearer: key })).body.functions[0];
    while ((await status()).instances.running !== 1) await sleep(50);

    const pool = new Pool(svc.url, { connections: CONCURRENCY + 10 });
    const invoke = async () => {
      const response = await pool.request({
        path: `/v2/svc/pexec/functions/${id}`, method: 'POST', body: JSON.stringify({ ms: 250 }),
        headers: { host: `api.localhost:${new URL(svc.url).port}`, authorization: `Bearer ${key}`, 'content-type': 'application/json', 'svc-poll-seconds': '60' },
      });
      const body = await response.body.json() as { pid?: number };
      return body.pid;
    };
    const initial = new Set([await invoke(), await invoke()]);

    let stop = false;
    const start = performance.now();
    let firstNewAt: number | undefined;
    const workers = Array.from({ length: CONCURRENCY }, async () => {
      while (!stop) {
        const pid = await invoke();
        if (firstNewAt === undefined && pid !== undefined && !initial.has(pid)) firstNewAt = performance.now() - start;
      }
    });
    let decidedAt: number | undefined;
    let readyAt: number | undefined;
    let desired = 1;
    while (performance.now() - start < 30_000) {
      const entry = await status();
      if (decidedAt === undefined && entry.desiredInstances > 1) {
        decidedAt = performance.now() - start;
        desired = entry.desiredInstances;
      }
      if (decidedAt !== undefined && readyAt === undefined && entry.instances.running >= desired) readyAt = performance.now() - start;
      if (readyAt !== undefined && firstNewAt !== undefined) break;
      await sleep(10);
    }
    stop = true;
    await Promise.all(workers);
    await pool.close();
    printTable(`Load step 0 → ${CONCURRENCY} concurrent requests (250 ms each; maxRequestConcurrency 5; 1-16 instances; platform policy; scaling interval ${INTERVAL_MS} ms)`,
      ['measure', 'seconds', 'scaling intervals'], [
        [`decision (desired 1 → ${desired})`, (decidedAt ?? Number.NaN) / 1000, (decidedAt ?? Number.NaN) / INTERVAL_MS],
        [`all ${desired} instances ready`, (readyAt ?? Number.NaN) / 1000, (readyAt ?? Number.NaN) / INTERVAL_MS],
        ['first request served by a new instance', (firstNewAt ?? Number.NaN) / 1000, (firstNewAt ?? Number.NaN) / INTERVAL_MS],
      ]);
  } finally {
    await svc.close();
  }
}

async function roundCost(backend: 'sqlite' | 'postgres') {
  const database = await createDatabase(backend);
  try {
    // 1,000 deployed versions through the API; then the platform stops and the autoscaler runs on its store.
    const svc = await startScalingTestPlatform({
      database, autoscaler: { enabled: false },
      config: { log: { level: 'warn' }, api: { accountBootstrap: { limits: { maxFunctions: VERSIONS + 10 } } } },
    });
    const token = await svc.token();
    for (let batch = 0; batch < VERSIONS; batch += 25) {
      await Promise.all(Array.from({ length: Math.min(25, VERSIONS - batch) }, async (_, offset) => {
        const created = await svc.api('POST', '/v2/svc/functions', {
          bearer: token, body: { name: `v${batch + offset}`, inferenceUrl: '/work', inferencePort: 8000, containerImage: 'bench/whoami:1' },
        });
        const { id, versionId } = created.body.function;
        const deployed = await svc.api('POST', `/v2/svc/deployments/functions/${id}/versions/${versionId}`, {
          bearer: token, body: { deploymentSpecifications: [localSpec({ minInstances: 0, maxInstances: 4 })] },
        });
        if (deployed.status !== 200) throw new Error(`deploy: ${deployed.status} ${deployed.text}`);
      }));
    }
    await svc.close();

    const store = await openDatabase({ dataDir: database.dataDir, databaseUrl: database.databaseUrl });
    const refs = (await store.db.selectFrom('deployments').select(['version_id', 'function_id', 'nca_id']).execute())
      .map((row) => ({ versionId: row.version_id, functionId: row.function_id, ncaId: row.nca_id }));
    const demand = new Map(refs.map((ref, index) => [ref.versionId, index % 5]));
    let held = new Map<string, number>();
    let clock = Date.parse('2030-01-01T00:00:00Z');
    const metrics = createMetrics();
    metrics.watchLoad(function* (): Iterable<FunctionLoad> {
      for (const ref of refs) yield { ...ref, queued: 0, inflight: demand.get(ref.versionId)!, lastRequestAt: clock - 1000 };
    });
    metrics.watchInstances(function* (): Iterable<FunctionInstances> {
      for (const ref of refs) yield { ...ref, running: held.get(ref.versionId) ?? 0, starting: 0 };
    });
    const plane = createAutoscalerPlane({
      db: store.db, metrics, log: createLogger('silent'), now: () => new Date(clock), replicaId: 'bench',
      settings: autoscalerSettingsSchema.parse({ scalingIntervalMs: 10_000, discoveryIntervalMs: 15_000 }),
    });
    const specsOf = new Map((await store.db.selectFrom('deployments').select(['version_id', 'specs']).execute())
      .map((row) => [row.version_id, (JSON.parse(row.specs) as { gpuSpecificationId: string }[])[0].gpuSpecificationId]));
    const discoveries = async () => (await metrics.registry.getSingleMetric('svc_autoscaler_function_discovery_duration_seconds')!.get()).values
      .find((value) => (value as { metricName?: string }).metricName?.endsWith('_count'))?.value ?? 0;
    const round = async () => {
      const started = performance.now();
      await plane.autoscaler!.runOnce();
      return performance.now() - started;
    };
    const first = await round();
    const plain: number[] = [];
    const withDiscovery: number[] = [];
    for (let index = 0; index < ROUNDS; index++) {
      clock += 10_000;
      // Placement has caught up with the last decisions; a tenth of the versions see their load change.
      const counts = await plane.desiredCounts.load();
      held = new Map(refs.map((ref) => [ref.versionId, counts.get(specsOf.get(ref.versionId)!) ?? 0]));
      for (let change = 0; change < refs.length / 10; change++) {
        const ref = refs[Math.floor(Math.random() * refs.length)];
        demand.set(ref.versionId, Math.floor(Math.random() * 6));
      }
      const before = await discoveries();
      const ms = await round();
      (await discoveries() > before ? withDiscovery : plain).push(ms);
    }
    const processed = (await metrics.registry.getSingleMetric('svc_autoscaler_requests_processed_total')!.get()).values[0]?.value ?? 0;
    await plane.stop();
    await store.close();
    plain.sort((a, b) => a - b);
    withDiscovery.sort((a, b) => a - b);
    return [
      [`${backend}: first round (lock, discover ${refs.length}, decide all)`, '1', first, first, first, Number.NaN],
      [`${backend}: scaling round`, String(plain.length), percentile(plain, 50), percentile(plain, 99), plain[plain.length - 1], processed / ROUNDS],
      [`${backend}: scaling round + discovery`, String(withDiscovery.length), percentile(withDiscovery, 50), percentile(withDiscovery, 99), withDiscovery[withDiscovery.length - 1], Number.NaN],
    ] as (string | number)[][];
  } finally {
    await database.drop();
  }
}

await loadStep();
const rows: (string | number)[][] = [];
for (const backend of await backends()) rows.push(...await roundCost(backend));
printTable(`Scaling loop cost per round, ${VERSIONS} deployed function versions (in-process source; 10 % change load per round; target ≤ 50 ms)`,
  ['round', 'rounds', 'p50 ms', 'p99 ms', 'max ms', 'changes/round'], rows);
