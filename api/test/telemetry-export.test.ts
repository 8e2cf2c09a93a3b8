// Telemetry export for real: a function's invocations (one span each, with its request id), its
// per-version metrics and its instances' log lines reach the telemetries it names, over OTLP/HTTP and
// OTLP/gRPC to receivers that decode them with the protocol's own protobuf definitions, and by remote-write to a real
// Prometheus (Debian `prometheus`, skipped with one line outside CI), which answers a query for them. An
// endpoint that is down costs the requests nothing: what would go there is dropped and counted.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TASK_KEY_SCOPES, taskBody } from './compute/tasks-fixtures.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { attributesOf, startOtlpGrpcReceiver, startOtlpReceiver, type OtlpReceiver } from './helpers/otlp-receiver.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { prometheusPresent, startPrometheus } from './helpers/prometheus.ts';
import { freePort, until } from './helpers/wait.ts';

/** The echo sample, health on /health, under a fresh name. */
const echo = (telemetries: Record<string, string>) => echoBody({
  name: undefined, health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 }, telemetries,
});

const exportSettings = { allowInternalEndpoints: true, flushMs: 50, metricsIntervalMs: 300, retryAfterMs: 300, timeoutMs: 2000 };

/** Every span, log record or metric of the receiver's requests for one signal, flattened. */
const spansOf = (receiver: OtlpReceiver) => receiver.received.traces.flatMap((request) =>
  (request.resourceSpans ?? []).flatMap((resource: any) => resource.scopeSpans.flatMap((scope: any) => scope.spans)));
const logRecordsOf = (receiver: OtlpReceiver) => receiver.received.logs.flatMap((request) =>
  (request.resourceLogs ?? []).flatMap((resource: any) => resource.scopeLogs.flatMap((scope: any) => scope.logRecords)));
const metricsOf = (receiver: OtlpReceiver) => receiver.received.metrics.flatMap((request) =>
  (request.resourceMetrics ?? []).flatMap((resource: any) => resource.scopeMetrics.flatMap((scope: any) => scope.metrics)));

describe('telemetry export', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let receiver: OtlpReceiver;
  const telemetry = async (body: Record<string, unknown>) => {
    const response = await svc.api('POST', '/v2/svc/telemetries', { bearer: token, body: { protocol: 'HTTP', secret: { name: 'token', value: 'collector-secret-0123' }, ...body } });
    assert.equal(response.status, 200, response.text);
    return response.body.telemetry.telemetryId as string;
  };
  const invoke = async (fn: Deployed, times: number) => {
    const ids: string[] = [];
    for (let index = 0; index < times; index++) {
      const response = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}/versions/${fn.versionId}`, { bearer: key, body: { index } });
      assert.equal(response.status, 200, response.text);
      ids.push(String(response.headers['svc-reqid']));
    }
    return ids;
  };

  before(async () => {
    receiver = await startOtlpReceiver();
    svc = await startTestPlatform({ config: { telemetry: exportSettings } });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
  });
  after(async () => {
    await svc?.close();
    await receiver?.close();
  });

  test('OTLP/HTTP: one span per invocation with its request id, the version metrics, and a crashed instance\'s lines', async () => {
    const otlp = await telemetry({ name: 'otlp', endpoint: `${receiver.url}/`, provider: 'GRAFANA_CLOUD', types: ['LOGS', 'METRICS', 'TRACES'] });
    const fn = await deploy(svc, token, echo({ tracesTelemetryId: otlp, metricsTelemetryId: otlp }));
    await waitFor(svc, token, fn, running);
    const requestIds = await invoke(fn, 3);

    const spans = await until('a span for each request', async () => {
      const mine = spansOf(receiver).filter((span) => requestIds.includes(String(attributesOf(span.attributes)['svc.request_id'])));
      return mine.length === 3 && mine;
    });
    for (const span of spans) {
      const attributes = attributesOf(span.attributes);
      assert.equal(span.name, 'invoke');
      assert.equal(attributes['svc.function.id'], fn.id);
      assert.equal(attributes['svc.function.version.id'], fn.versionId);
      assert.equal(String(attributes['http.response.status_code']), '200');
      assert.ok(BigInt(span.endTimeUnixNano) >= BigInt(span.startTimeUnixNano));
    }
    assert.equal(receiver.received.traces[0].headers.authorization, 'Bearer collector-secret-0123');

    await until('the version\'s request counter at 3', async () => metricsOf(receiver).some((metric) => metric.name === 'svc.function.requests'
      && metric.sum.dataPoints.some((point: any) => attributesOf(point.attributes)['svc.function.version.id'] === fn.versionId && Number(point.asInt) === 3)));
    assert.ok(metricsOf(receiver).some((metric) => metric.name === 'svc.function.request.duration' && metric.unit === 's'));

    const crash = await deploy(svc, token, { name: 'crash', inferenceUrl: '/', inferencePort: 8000, containerImage: 'test/crash:1', telemetries: { logsTelemetryId: otlp } });
    const records = await until('the crashed instance\'s lines', async () => {
      const mine = logRecordsOf(receiver).filter((record) => attributesOf(record.attributes)['svc.function.version.id'] === crash.versionId);
      return mine.some((record) => record.body.stringValue.includes('fatal: model weights not found')) && mine;
    }, 30_000);
    assert.equal(attributesOf(records[0].attributes)['svc.function.id'], crash.id);
    assert.ok(attributesOf(records[0].attributes)['svc.instance.id']);
    assert.equal(spansOf(receiver).filter((span) => attributesOf(span.attributes)['svc.function.version.id'] === crash.versionId).length, 0);

    // Deleted, the telemetry's exporter is closed at once: its counters leave /metrics.
    const exportedLine = async () => (await svc.api('GET', '/metrics')).text.includes(`svc_telemetry_exported_total{telemetry_id="${otlp}"`);
    assert.ok(await exportedLine());
    assert.equal((await svc.api('DELETE', `/v2/svc/telemetries/${otlp}`, { bearer: token })).status, 204);
    assert.equal(await exportedLine(), false);
  });

  test("a failed task's last lines reach its LOGS telemetry, named by the task's id", async () => {
    const logs = await telemetry({ name: 'task-logs', endpoint: receiver.url, provider: 'SPLUNK', types: ['LOGS'] });
    const taskKey = await svc.apiKey(token, TASK_KEY_SCOPES, { task: true });
    const launched = await svc.api('POST', '/v1/svct/tasks', {
      bearer: taskKey, body: taskBody({ name: 'failing-task', resultHandlingStrategy: 'NONE', telemetries: { logsTelemetryId: logs } }, { TASK_EXIT_CODE: '3' }),
    });
    assert.equal(launched.status, 200, launched.text);
    const taskId = launched.body.task.id;
    const records = await until('the task\'s lines', async () => {
      const mine = logRecordsOf(receiver).filter((record) => attributesOf(record.attributes)['svc.task.id'] === taskId);
      return mine.length > 0 && mine;
    }, 30_000);
    assert.equal(attributesOf(records[0].attributes)['svc.nca_id'], 'svc-default');
    assert.ok(records.every((record) => typeof record.body.stringValue === 'string'));
  });

  test('every line a running function writes reaches its LOGS telemetry, not only a failure\'s last lines', async () => {
    const logs = await telemetry({ name: 'otlp-lines', endpoint: `${receiver.url}/`, provider: 'GRAFANA_CLOUD', types: ['LOGS'] });
    const talker = await deploy(svc, token, {
      name: 'talker-logs', inferenceUrl: '/', inferencePort: 8000, containerImage: 'test/talker:1', telemetries: { logsTelemetryId: logs },
      health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT5S', expectedStatusCode: 200 },
    });
    await waitFor(svc, token, talker, running);
    const said = async (say: string) => {
      const response = await svc.api('POST', `/v2/svc/pexec/functions/${talker.id}/versions/${talker.versionId}`, { bearer: key, body: { say } });
      assert.equal(response.status, 200, response.text);
      return until(`"${say}" at the receiver`, async () => logRecordsOf(receiver).find((record) =>
        attributesOf(record.attributes)['svc.function.version.id'] === talker.versionId && record.body.stringValue === `said: ${say}`), 20_000);
    };
    const first = await said('hello telemetry');
    assert.equal(attributesOf(first.attributes)['svc.function.id'], talker.id);
    assert.ok(attributesOf(first.attributes)['svc.instance.id']);
    await said('and again');
  });

  test('OTLP/gRPC: spans with their request ids and the version\'s counter reach a gRPC collector, the secret as metadata', async () => {
    const grpc = await startOtlpGrpcReceiver();
    try {
      const telemetryId = await telemetry({ name: 'grpc', endpoint: grpc.url, protocol: 'GRPC', provider: 'DATADOG', types: ['TRACES', 'METRICS'], secret: { name: 'dd', value: { headers: { 'DD-API-KEY': 'dd-key-0123' } } } });
      const fn = await deploy(svc, token, echo({ tracesTelemetryId: telemetryId, metricsTelemetryId: telemetryId }));
      await waitFor(svc, token, fn, running);
      const requestIds = await invoke(fn, 2);
      await until('a span for each request over gRPC', async () =>
        spansOf(grpc).filter((span) => requestIds.includes(String(attributesOf(span.attributes)['svc.request_id']))).length === 2);
      await until('the version\'s counter over gRPC', async () => metricsOf(grpc).some((metric) => metric.name === 'svc.function.requests'
        && metric.sum.dataPoints.some((point: any) => attributesOf(point.attributes)['svc.function.version.id'] === fn.versionId)));
      assert.equal(grpc.received.traces.find((request) => request.resourceSpans?.length)?.headers['dd-api-key'], 'dd-key-0123');
    } finally {
      await grpc.close();
    }
  });

  test('PROMETHEUS: a real Prometheus receives the version\'s series by remote-write and answers a query', { skip: !prometheusPresent('the remote-write case') }, async () => {
    const prometheus = await startPrometheus();
    try {
      const prom = await telemetry({ name: 'prometheus', endpoint: prometheus.writeUrl, provider: 'PROMETHEUS', types: ['METRICS'], secret: { name: 'basic', value: { username: 'svc', password: 'remote-write-pw' } } });
      const fn = await deploy(svc, token, echo({ metricsTelemetryId: prom }));
      await waitFor(svc, token, fn, running);
      await invoke(fn, 4);
      const [series] = await until('Prometheus to answer for the version', async () => {
        const result = await prometheus.query(`svc_function_requests_total{function_version_id="${fn.versionId}"}`);
        return result.length > 0 && result[0].value[1] === '4' && result;
      }, 30_000);
      assert.deepEqual({ ...series.metric, instance: undefined }, {
        __name__: 'svc_function_requests_total', nca_id: 'svc-default', function_id: fn.id, function_version_id: fn.versionId, status: '2xx', instance: undefined,
      });
      assert.match(series.metric.instance, /^.+\/\d+$/, 'the exporting process (host/pid)');
      const count = await prometheus.query(`svc_function_request_duration_seconds_count{function_version_id="${fn.versionId}"}`);
      assert.equal(count[0]?.value[1], '4');
    } finally {
      await prometheus.close();
    }
  });

  test('an endpoint that fails is left alone, probed, and gets the spans again once it answers', async () => {
    const flaky = await startOtlpReceiver();
    try {
      const telemetryId = await telemetry({ name: 'flaky', endpoint: flaky.url, provider: 'SPLUNK', types: ['TRACES'] });
      const fn = await deploy(svc, token, echo({ tracesTelemetryId: telemetryId }));
      await waitFor(svc, token, fn, running);
      flaky.failing = true;
      await invoke(fn, 2);
      await until('the failed spans to be counted', async () => (await svc.api('GET', '/metrics')).text
        .includes(`svc_telemetry_dropped_total{telemetry_id="${telemetryId}",signal="traces"}`));
      flaky.failing = false;
      const after: string[] = [];
      const later = await until('a span of a request made after it came back', async () => {
        after.push(...await invoke(fn, 1));
        return spansOf(flaky).find((span) => after.includes(String(attributesOf(span.attributes)['svc.request_id'])));
      }, 30_000);
      assert.equal(attributesOf(later.attributes)['svc.function.version.id'], fn.versionId);
    } finally {
      await flaky.close();
    }
  });

  test('a down endpoint: every request answers as usual, and what would go there is dropped and counted', async () => {
    const down = await telemetry({ name: 'down', endpoint: `http://127.0.0.1:${await freePort()}`, provider: 'DATADOG', types: ['TRACES'] });
    const fn = await deploy(svc, token, echo({ tracesTelemetryId: down }));
    await waitFor(svc, token, fn, running);
    await invoke(fn, 5);
    const droppedNow = async () => {
      const line = (await svc.api('GET', '/metrics')).text.split('\n')
        .find((candidate) => candidate.startsWith(`svc_telemetry_dropped_total{telemetry_id="${down}",signal="traces"}`));
      return line === undefined ? 0 : Number(line.split(' ').pop());
    };
    const dropped = await until('the dropped spans to be counted', async () => (await droppedNow()) >= 1 && droppedNow());
    // Once known down, a request's span is dropped on the spot (counted), never queued for the endpoint.
    await invoke(fn, 5);
    await until('the later requests to be counted too', async () => (await droppedNow()) >= dropped + 5);
  });
});
