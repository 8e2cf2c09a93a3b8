// Health endpoints (spec 2.5, 4.8, 7) on PostgreSQL: liveness always 200 and touches no database;
// readiness 503 while the database is gone (db_client unhealthy in /health and in /metrics, the discovery
// lock failing to renew) and 200 again once it is back. PostgreSQL is required in CI; elsewhere its absence
// skips this file with one printed line.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { metricValue, startScalingTestPlatform, type ScalingTestPlatform } from './helpers/autoscaler-platform.ts';
import { POSTGRES_ADMIN_URL, postgresAvailable } from './helpers/databases.ts';
import { until } from './helpers/wait.ts';

describe('health on PostgreSQL', { skip: !(await postgresAvailable()) }, () => {
  let svc: ScalingTestPlatform;
  let admin: pg.Client;
  let name: string;

  before(async () => {
    svc = await startScalingTestPlatform({ backend: 'postgres', config: { compute: { localCluster: { enabled: false } } } });
    name = new URL(svc.database.databaseUrl!).pathname.slice(1);
    admin = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
    await admin.connect();
  });
  after(async () => {
    await admin.query(`alter database ${name} allow_connections true`).catch(() => {});
    await admin.end();
    await svc.close();
  });

    const leaderFailures = async () => metricValue(await svc.metricsText(), 'svc_autoscaler_distributed_lock_acquisition_failures_total');

  test('readiness flips to 503 when the database goes away and back to 200 when it returns; liveness stays 200', async () => {
    assert.deepEqual((await svc.api('GET', '/admin/health/liveness')).body, { status: 'UP' });
    assert.deepEqual((await svc.api('GET', '/admin/health/readiness')).body, { status: 'UP' });
    const healthy = await svc.api('GET', '/health');
    assert.equal(healthy.status, 200);
    assert.deepEqual(Object.keys(healthy.body.components).sort(), ['db_client', 'event_loop', 'timeseries_db_client']);
    await until('the autoscaler to lead', async () => metricValue(await svc.metricsText(), 'svc_autoscaler_distributed_lock') === 1);
    const failuresBefore = await leaderFailures();

    // The database goes away: no new connections, and the platform's are cut.
    await admin.query(`alter database ${name} allow_connections false`);
    await admin.query('select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()', [name]);
    await until('readiness 503', async () => (await svc.api('GET', '/admin/health/readiness')).status === 503);
    assert.deepEqual((await svc.api('GET', '/admin/health/readiness')).body, { status: 'DOWN' });
    assert.equal((await svc.api('GET', '/admin/health/liveness')).status, 200, 'liveness checks no database');
    const report = await svc.api('GET', '/health');
    assert.equal(report.status, 503);
    assert.equal(report.body.status, 'unhealthy');
    assert.equal(report.body.components.db_client.status, 'unhealthy');
    assert.ok(report.body.components.db_client.error, 'names the failure');
    assert.ok(!report.text.includes(svc.database.databaseUrl!), 'but not the connection string');
    assert.equal(report.body.components.timeseries_db_client.status, 'healthy');
    assert.equal(metricValue(await svc.metricsText(), 'svc_health_component_status', { component: 'db_client' }), 0);
    await until('the discovery lock to fail renewing', async () => (await leaderFailures()) > failuresBefore);
    assert.equal(metricValue(await svc.metricsText(), 'svc_autoscaler_distributed_lock'), 0);

    await admin.query(`alter database ${name} allow_connections true`);
    await until('readiness 200', async () => (await svc.api('GET', '/admin/health/readiness')).status === 200);
    assert.equal((await svc.api('GET', '/health')).body.components.db_client.status, 'healthy');
    assert.equal(metricValue(await svc.metricsText(), 'svc_health_component_status', { component: 'db_client' }), 1);
    await until('the lock to be taken again', async () => metricValue(await svc.metricsText(), 'svc_autoscaler_distributed_lock') === 1);
  });
});
