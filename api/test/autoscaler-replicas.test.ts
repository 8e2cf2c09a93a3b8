// Autoscaler replicas (spec 8, discovery_lock_duration_seconds): two `svc autoscaler` processes on one
// store elect one discoverer through the store's lock; the other counts failed acquisitions. When the
// leader is killed (SIGKILL: no release), its lock expires and the other replica takes over. Both
// backends: SQLite (one file, two processes) and PostgreSQL (in CI always; elsewhere when reachable).
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, describe, test } from 'node:test';
import { openDatabase } from '../src/database.ts';
import type { AutoscalerDatabase } from '../src/autoscaler/migration.ts';
import { metricValue } from './helpers/autoscaler-platform.ts';
import { backends, createDatabase } from './helpers/databases.ts';
import { request } from './helpers/http.ts';
import { until } from './helpers/wait.ts';

const REPLICA = fileURLToPath(new URL('./helpers/autoscaler-replica.ts', import.meta.url));
const SETTINGS = { scalingIntervalMs: 100, discoveryIntervalMs: 200, discoveryLockDurationSeconds: 1.5, host: '127.0.0.1', port: 0 };
const children = new Set<ChildProcess>();

after(() => {
  for (const child of children) child.kill('SIGKILL');
});

interface Replica {
  child: ChildProcess;
  metrics(): Promise<string>;
  get(path: string): ReturnType<typeof request>;
}

async function startReplica(store: { dataDir: string; databaseUrl?: string }, replicaId: string): Promise<Replica> {
  const child = spawn(process.execPath, [REPLICA, JSON.stringify({ store, settings: SETTINGS, replicaId })], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  const lines = createInterface({ input: child.stdout! });
  const [line] = await Promise.race([once(lines, 'line'), once(child, 'exit').then(() => { throw new Error(`${replicaId} exited before listening`); })]);
  const { port } = JSON.parse(line as string) as { port: number };
  const base = `http://127.0.0.1:${port}`;
  return {
    child,
    get: (path) => request(base, 'GET', path),
    async metrics() {
      return (await request(base, 'GET', '/metrics')).text;
    },
  };
}

describe('autoscaler replicas and the discovery lock', async () => {
  for (const backend of await backends()) {
    test(`${backend}: one discoverer of two; after the leader is killed its lock expires and the other takes over`, async () => {
      const database = await createDatabase(backend);
      const store = { dataDir: database.dataDir, databaseUrl: database.databaseUrl };
      const observer = await openDatabase(store);
      const db = observer.db.withTables<AutoscalerDatabase>();
      const lockRow = () => db.selectFrom('autoscaler_locks').selectAll().where('name', '=', 'discovery').executeTakeFirst();
      try {
        const first = await startReplica(store, 'replica-a');
        await until('replica-a to lead', async () => metricValue(await first.metrics(), 'svc_autoscaler_distributed_lock') === 1);
        const second = await startReplica(store, 'replica-b');
        await until('replica-b to fail acquiring twice', async () =>
          metricValue(await second.metrics(), 'svc_autoscaler_distributed_lock_acquisition_failures_total') >= 2);

        const [leaderText, followerText] = [await first.metrics(), await second.metrics()];
        assert.equal(metricValue(leaderText, 'svc_autoscaler_distributed_lock'), 1);
        assert.equal(metricValue(followerText, 'svc_autoscaler_distributed_lock'), 0);
        assert.ok(metricValue(leaderText, 'svc_autoscaler_function_discovery_duration_seconds_count') > 0, 'the leader discovers');
        assert.equal(metricValue(followerText, 'svc_autoscaler_function_discovery_duration_seconds_count'), 0, 'the follower does not');
        assert.equal(metricValue(followerText, 'svc_autoscaler_scaling_round_duration_seconds_count'), 0, 'nor does it scale');
        const held = await lockRow();
        assert.equal(held?.holder, 'replica-a');

        // A crash: no release. The lock row stays until it expires.
        first.child.kill('SIGKILL');
        await once(first.child, 'exit');
        const stale = await lockRow();
        assert.equal(stale?.holder, 'replica-a');
        await until('replica-b to take over', async () => metricValue(await second.metrics(), 'svc_autoscaler_distributed_lock') === 1);
        const taken = await lockRow();
        assert.equal(taken?.holder, 'replica-b');
        assert.ok(taken!.acquired_at >= stale!.expires_at, `taken at ${taken!.acquired_at}, not before the old lease ended at ${stale!.expires_at}`);
        await until('replica-b to discover', async () => metricValue(await second.metrics(), 'svc_autoscaler_function_discovery_duration_seconds_count') > 0);
        assert.equal((await second.get('/admin/health/readiness')).status, 200);

        // A clean stop gives the lock up at once.
        second.child.kill('SIGTERM');
        await once(second.child, 'exit');
        assert.equal(await lockRow(), undefined);
      } finally {
        await observer.close();
        await database.drop();
      }
    });
  }
});
