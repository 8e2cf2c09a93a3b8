// The Prometheus MetricsSource (SVC_PROMETHEUS_URL): a real Prometheus (Debian `prometheus`) scrapes the
// gateway's /metrics every second, and the autoscaler reads the series back over /api/v1/query_range to
// discover versions and scale a burst. Prometheus gone: timeseries_db_client unhealthy, readiness 503,
// error counter up. Failure classes (auth, server side) against a stand-in answering 401 and 503. The
// real-Prometheus cases need /usr/bin/prometheus: required in CI, skipped with one line elsewhere.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { createAutoscalerMetrics } from '../src/autoscaler/metrics.ts';
import { createPrometheusSource } from '../src/autoscaler/prometheus.ts';
import { instrumented, TimeseriesError } from '../src/autoscaler/source.ts';
import { metricValue, startScalingTestPlatform, type ScalingTestPlatform } from './helpers/autoscaler-platform.ts';
import { localSpec } from './helpers/fixtures.ts';
import { freePort, until } from './helpers/wait.ts';

const PROMETHEUS = '/usr/bin/prometheus';

function prometheusPresent(): boolean {
  if (existsSync(PROMETHEUS)) return true;
  if (process.env.CI) throw new Error(`${PROMETHEUS} is required in CI (Debian package prometheus)`);
  console.log('# skipping the real-Prometheus cases: install Prometheus (Debian: prometheus)');
  return false;
}

describe('Prometheus source against a real Prometheus', { skip: !prometheusPresent() }, () => {
  let svc: ScalingTestPlatform;
  let prometheus: ChildProcess;
  let prometheusUrl: string;
  let dir: string;

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'svc-prometheus-'));
    const [gatewayPort, prometheusPort] = [await freePort(), await freePort()];
    writeFileSync(path.join(dir, 'prometheus.yml'), [
      'global: { scrape_interval: 1s, evaluation_interval: 1s }',
      'scrape_configs:',
      '  - job_name: svc',
      `    static_configs: [{ targets: ['127.0.0.1:${gatewayPort}'] }]`,
    ].join('\n'));
    prometheus = spawn(PROMETHEUS, [
      `--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${prometheusPort}`, '--log.level=warn',
    ], { stdio: ['ignore', 'ignore', 'inherit'] });
    prometheusUrl = `http://127.0.0.1:${prometheusPort}`;
    await until('Prometheus to be ready', async () => (await fetch(`${prometheusUrl}/-/ready`).catch(() => undefined))?.status === 200);
    svc = await startScalingTestPlatform({
      config: { gateway: { port: gatewayPort } },
      autoscaler: { prometheusUrl, scalingIntervalMs: 500, discoveryIntervalMs: 500 },
    });
  });
  after(async () => {
    prometheus?.kill('SIGKILL');
    await svc?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('discovery and load come back from Prometheus; a burst scales up through it', async () => {
    const token = await svc.token();
    const key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    const created = await svc.api('POST', '/v2/svc/functions', {
      bearer: token,
      body: { name: 'scraped', inferenceUrl: '/slow', inferencePort: 8000, containerImage: 'local/slow:1', health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 } },
    });
    const { id, versionId } = created.body.function;
    await svc.api('POST', `/v2/svc/deployments/functions/${id}/versions/${versionId}`, {
      bearer: token,
      body: { deploymentSpecifications: [localSpec({
        minInstances: 1, maxInstances: 3, autoscalingConfigurationPolicy: 'CUSTOM_CONFIGURATION',
        autoscalingConfiguration: { scaleUpDetails: { factor: 2, threshold: 50 }, scaleDownDetails: { factor: 0.5, threshold: 25 } },
      })] },
    });

    // The source on its own, reading what Prometheus scraped from the gateway.
    const source = createPrometheusSource({ url: prometheusUrl, timeoutMs: 5000, now: () => Date.now() });
    await until('Prometheus to have scraped the instance', async () =>
      (await source.discover(60_000)).some((version) => version.versionId === versionId));
    const [found] = (await source.discover(60_000)).filter((version) => version.versionId === versionId);
    assert.deepEqual(found, { versionId, ncaId: 'svc-default', functionId: id });
    const loads = await source.load(10_000, 1000);
    const samples = loads.get(versionId)!.samples;
    assert.ok(samples.length >= 1);
    assert.equal(samples[samples.length - 1].instances, 1);
    assert.equal(samples[samples.length - 1].demand, 0);

    // The platform's autoscaler reads the same series back and scales the burst.
    const burst = Array.from({ length: 6 }, () => svc.api('POST', `/v2/svc/pexec/functions/${id}`, {
      bearer: key, body: { seconds: 1.5 }, headers: { 'svc-poll-seconds': '60' },
    }));
    let entry: any;
    await until('the burst to scale up', async () => {
      entry = (await svc.api('GET', '/v2/svc/autoscaler/functions', { bearer: key })).body.functions[0];
      return entry.desiredInstances === 3;
    });
    assert.match(entry.detail, /above 50%/);
    const busy = await source.load(10_000, 1000);
    assert.ok(busy.get(versionId)!.lastInvocationAt! > 0, 'the last invocation comes back too');
    assert.deepEqual((await Promise.all(burst)).map((response) => response.status), Array(6).fill(200));
    const text = await svc.metricsText();
    assert.ok(metricValue(text, 'svc_autoscaler_timeseries_db_requests_total', { status: 'ok' }) > 0);
    assert.equal(metricValue(text, 'svc_health_component_status', { component: 'timeseries_db_client' }), 1);
  });

  test('Prometheus gone: timeseries_db_client unhealthy, readiness 503, the error counter rises', async () => {
    const errors = async () => metricValue(await svc.metricsText(), 'svc_autoscaler_timeseries_db_requests_total', { status: 'error' });
    const before = await errors();
    prometheus.kill('SIGKILL');
    await until('readiness 503', async () => (await svc.api('GET', '/admin/health/readiness')).status === 503);
    const report = await svc.api('GET', '/health');
    assert.equal(report.body.components.timeseries_db_client.status, 'unhealthy');
    assert.equal(report.body.components.db_client.status, 'healthy');
    assert.ok(!report.text.includes(prometheusUrl), 'the URL stays out of the report');
    await until('queries to fail', async () => (await errors()) > before);
    assert.equal((await svc.api('GET', '/admin/health/liveness')).status, 200);
  });
});

describe('Prometheus source failure classes', () => {
  let server: http.Server;
  let url: string;
  let answer = { status: 200, body: '{}' };
  let seen: http.IncomingHttpHeaders = {};

  before(async () => {
    server = http.createServer((req, res) => {
      seen = req.headers;
      res.writeHead(answer.status, { 'content-type': 'application/json' }).end(answer.body);
    }).listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  test('401/403 raise the auth-failure counter, 5xx the server-side one, every failure the error count', async () => {
    const registry = new Registry();
    const metrics = createAutoscalerMetrics(registry);
    const source = instrumented(createPrometheusSource({ url: `http://reader:s3cret@${url.slice(7)}`, timeoutMs: 2000, now: () => Date.now() }), metrics);
    const failure = async (status: number, body: string) => {
      answer = { status, body };
      return source.ping().then(() => undefined, (error: TimeseriesError) => error);
    };
    const unauthorized = await failure(401, '{"status":"error","error":"unauthorized"}');
    assert.equal(unauthorized?.kind, 'auth');
    assert.equal(seen.authorization, `Basic ${Buffer.from('reader:s3cret').toString('base64')}`, 'user:password in the URL is basic auth');
    assert.ok(!unauthorized!.message.includes('s3cret'));
    assert.equal((await failure(403, '{}'))?.kind, 'auth');
    assert.equal((await failure(503, '{"status":"error","error":"query timed out"}'))?.kind, 'server');
    assert.equal((await failure(400, '{"status":"error","errorType":"bad_data","error":"parse error"}'))?.kind, 'client');
    answer = { status: 200, body: '{"status":"success","data":{"resultType":"matrix","result":[]}}' };
    await source.ping();
    const text = await registry.metrics();
    assert.equal(metricValue(text, 'svc_autoscaler_timeseries_db_auth_failure_total'), 2);
    assert.equal(metricValue(text, 'svc_autoscaler_timeseries_db_server_side_failure_total'), 1);
    assert.equal(metricValue(text, 'svc_autoscaler_timeseries_db_requests_total', { status: 'error' }), 4);
    assert.equal(metricValue(text, 'svc_autoscaler_timeseries_db_requests_total', { status: 'ok' }), 1);
    assert.equal(metricValue(text, 'svc_autoscaler_timeseries_db_request_duration_milliseconds_count'), 5);

    const bearer = createPrometheusSource({ url, token: 'tsdb-token', timeoutMs: 2000, now: () => Date.now() });
    await bearer.ping();
    assert.equal(seen.authorization, 'Bearer tsdb-token');
  });
});
