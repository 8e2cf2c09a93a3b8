// GET /metrics (prom-client, one registry per platform): HTTP requests by route template, invocations per
// account/function/version with their durations, queue depth, in-flight requests and instances, health;
// labels never carry made-up ids; no credential in the text; with SVC_METRICS_TOKEN only for that bearer.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { metricValue, startScalingTestPlatform, type ScalingTestPlatform } from './helpers/autoscaler-platform.ts';
import { localSpec } from './helpers/fixtures.ts';

const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 };

describe('metrics', () => {
  let svc: ScalingTestPlatform;
  let token: string;
  let key: string;
  let fn: { id: string; versionId: string };

  before(async () => {
    svc = await startScalingTestPlatform({ autoscaler: { enabled: false } });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function']);
    const created = await svc.api('POST', '/v2/svc/functions', {
      bearer: token, body: { name: 'metered', inferenceUrl: '/slow', inferencePort: 8000, containerImage: 'local/slow:1', health },
    });
    fn = { id: created.body.function.id, versionId: created.body.function.versionId };
    await svc.api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      bearer: token, body: { deploymentSpecifications: [localSpec({ minInstances: 1, maxInstances: 1 })] },
    });
    const deadline = Date.now() + 20_000;
    while (metricValue(await svc.metricsText(), 'svc_function_instances', { function_version_id: fn.versionId, state: 'running' }) !== 1) {
      if (Date.now() > deadline) throw new Error('the instance did not start');
      await sleep(50);
    }
  });
  after(() => svc.close());

  const labels = () => ({ nca_id: 'svc-default', function_id: fn.id, function_version_id: fn.versionId });

  test('queue depth, in-flight and instances per version while requests run; totals and durations after', async () => {
    const requests = Array.from({ length: 3 }, () => svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, {
      bearer: key, body: { seconds: 0.6 }, headers: { 'svc-poll-seconds': '30' },
    }));
    let busy = '';
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      busy = await svc.metricsText();
      if (metricValue(busy, 'svc_function_inflight_requests', labels()) === 1 && metricValue(busy, 'svc_function_queue_depth', labels()) === 2) break;
      await sleep(20);
    }
    assert.equal(metricValue(busy, 'svc_function_inflight_requests', labels()), 1, 'one instance of concurrency 1 runs one');
    assert.equal(metricValue(busy, 'svc_function_queue_depth', labels()), 2, 'and two wait');
    assert.equal(metricValue(busy, 'svc_function_instances', { ...labels(), state: 'running' }), 1);
    assert.ok(metricValue(busy, 'svc_function_last_request_timestamp_seconds', labels()) > 0);
    assert.deepEqual((await Promise.all(requests)).map((response) => response.status), [200, 200, 200]);

    const done = await svc.metricsText();
    assert.equal(metricValue(done, 'svc_function_requests_total', { ...labels(), status: '2xx' }), 3);
    assert.equal(metricValue(done, 'svc_function_request_duration_seconds_count', { ...labels(), status: '2xx' }), 3);
    assert.ok(metricValue(done, 'svc_function_request_duration_seconds_sum', { ...labels(), status: '2xx' }) >= 3 * 0.6);
    assert.equal(metricValue(done, 'svc_function_inflight_requests', labels()), 0);
    assert.equal(metricValue(done, 'svc_http_requests_total', { host: 'api', method: 'POST', route: '/v2/svc/pexec/functions/{functionId}', status: '200' }), 3);
  });

  test('labels never carry an id a caller made up; no credential appears', async () => {
    const madeUp = randomUUID();
    assert.equal((await svc.api('POST', `/v2/svc/pexec/functions/${madeUp}`, { bearer: key, body: {} })).status, 404);
    assert.equal((await svc.api('GET', `/no/such/${madeUp}`, { bearer: key })).status, 404);
    const text = await svc.metricsText();
    assert.ok(!text.includes(madeUp), 'the unknown id is in no label');
    assert.equal(metricValue(text, 'svc_http_requests_total', { route: '/v2/svc/pexec/functions/{functionId}', status: '404' }), 1);
    assert.equal(metricValue(text, 'svc_http_requests_total', { route: 'unmatched', status: '404' }), 1);
    for (const secret of [key, token]) assert.ok(!text.includes(secret));
    assert.doesNotMatch(text, /authorization|bearer|svcapi-|nvapi-/i);
    assert.equal(metricValue(text, 'svc_health_component_status', { component: 'db_client' }), 1);
    assert.match(text, /^process_cpu_user_seconds_total /m);
  });
});

describe('metrics token', () => {
  let svc: ScalingTestPlatform;
  const secret = 'metrics-token-0123456789abcdef';

  before(async () => {
    svc = await startScalingTestPlatform({ autoscaler: { enabled: false }, metrics: { token: secret }, config: { compute: { localCluster: { enabled: false } } } });
  });
  after(() => svc.close());

  test('with SVC_METRICS_TOKEN set, /metrics answers only that bearer', async () => {
    const refused = await svc.api('GET', '/metrics');
    assert.equal(refused.status, 401);
    assert.equal(refused.body.type, 'urn:svc:problem-details:unauthorized');
    assert.doesNotMatch(refused.text, new RegExp(secret));
    assert.equal((await svc.api('GET', '/metrics', { bearer: 'metrics-token-wrong-0123456789' })).status, 401);
    assert.match(await svc.metricsText(secret), /svc_http_requests_total/);
  });
});
