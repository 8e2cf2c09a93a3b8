// Telemetries (the reference's /v2/svc/telemetries): the shapes, every rule naming its field, the secret
// that is sealed at rest and never answered, the account's quota, isolation between accounts, and a
// function's or task's `telemetries` ids that must name telemetries of its own account.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { TASK_KEY_SCOPES, taskBody } from './compute/tasks-fixtures.ts';
import { echoBody } from './helpers/fixtures.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

const SECRET = 'otlp-token-that-must-never-leave-0123456789';

export const otlpTelemetry = (endpoint: string, overrides: Record<string, unknown> = {}) => ({
  name: 'collector', endpoint, protocol: 'HTTP', provider: 'GRAFANA_CLOUD', types: ['LOGS', 'METRICS', 'TRACES'],
  secret: { name: 'collector-token', value: SECRET }, ...overrides,
});

describe('telemetries API', () => {
  let svc: TestPlatform;
  let token: string;
  let otherToken: string;
  const create = (body: unknown, bearer = token) => svc.api('POST', '/v2/svc/telemetries', { bearer, body });

  before(async () => {
    svc = await startTestPlatform({ config: { api: { accountBootstrap: { limits: { maxTelemetries: 3 } } } } });
    token = await svc.token();
    assert.equal((await svc.api('POST', '/v2/svc/accounts/other', { bearer: await svc.adminToken(), body: {} })).status, 200);
    otherToken = await svc.token({ ncaId: 'other' });
  });
  after(() => svc.close());

  test('create, get, list and delete answer the telemetry without its secret; the secret is sealed at rest', async () => {
    const created = await create(otlpTelemetry('https://otlp.example.com/otlp', { provider: 'grafana_cloud', types: ['traces', 'LOGS'] }));
    assert.equal(created.status, 200, created.text);
    const telemetry = created.body.telemetry;
    assert.match(telemetry.telemetryId, /^[0-9a-f-]{36}$/);
    assert.deepEqual({ ...telemetry, telemetryId: undefined, createdAt: undefined }, {
      telemetryId: undefined, createdAt: undefined, name: 'collector', endpoint: 'https://otlp.example.com/otlp', protocol: 'HTTP',
      provider: 'GRAFANA_CLOUD', types: ['TRACES', 'LOGS'], secret: { name: 'collector-token' },
    });
    const got = await svc.api('GET', `/v2/svc/telemetries/${telemetry.telemetryId}`, { bearer: token });
    assert.deepEqual(got.body, { telemetry });
    const listed = await svc.api('GET', '/v2/svc/telemetries', { bearer: token });
    assert.deepEqual(listed.body.telemetries.map((item: any) => item.telemetryId), [telemetry.telemetryId]);
    for (const response of [created, got, listed]) assert.ok(!response.text.includes(SECRET));
    const files = ['svc.db', 'svc.db-wal'].map((name) => path.join(svc.database.dataDir, name)).filter((file) => existsSync(file));
    assert.ok(files.length > 0);
    for (const file of files) assert.ok(!readFileSync(file).includes(SECRET), `${file} holds the secret in the clear`);

    assert.equal((await svc.api('DELETE', `/v2/svc/telemetries/${telemetry.telemetryId}`, { bearer: token })).status, 204);
    assert.equal((await svc.api('GET', `/v2/svc/telemetries/${telemetry.telemetryId}`, { bearer: token })).status, 404);
    assert.equal((await svc.api('DELETE', `/v2/svc/telemetries/${telemetry.telemetryId}`, { bearer: token })).status, 404);
  });

  test('bad input is a 400 naming the field', async () => {
    const cases: [string, unknown][] = [
      ['endpoint', otlpTelemetry('ftp://collector.example.com')],
      ['endpoint', otlpTelemetry('https://127.0.0.1:4318')],
      ['endpoint', otlpTelemetry('http://[::1]:4318')],
      ['endpoint', otlpTelemetry('http://localhost:4318')],
      ['endpoint', otlpTelemetry('http://10.1.2.3:4318')],
      ['protocol', otlpTelemetry('https://prom.example.com/api/v1/write', { protocol: 'GRPC', provider: 'PROMETHEUS', types: ['METRICS'] })],
      ['protocol', otlpTelemetry('https://otlp.example.com', { protocol: 'UDP' })],
      ['provider', otlpTelemetry('https://otlp.example.com', { provider: 'NOPE' })],
      ['types', otlpTelemetry('https://otlp.example.com', { types: [] })],
      ['types.0', otlpTelemetry('https://otlp.example.com', { types: ['EVENTS'] })],
      ['types', otlpTelemetry('https://prom.example.com/api/v1/write', { provider: 'PROMETHEUS', types: ['METRICS', 'LOGS'] })],
      ['secret.value', otlpTelemetry('https://otlp.example.com', { secret: { name: 's', value: { user: 'x' } } })],
      ['secret', otlpTelemetry('https://otlp.example.com', { secret: undefined })],
      ['name', otlpTelemetry('https://otlp.example.com', { name: '-bad' })],
    ];
    for (const [field, body] of cases) {
      const response = await create(body);
      assert.equal(response.status, 400, `${field}: ${response.text}`);
      assert.ok(response.body.errors.some((error: any) => error.field === field), `${field}: ${response.text}`);
      assert.ok(!response.text.includes(SECRET));
    }
  });

  test('names are unique per account (409); the quota counts telemetries (400 quota-exceeded)', async () => {
    const body = (name: string) => otlpTelemetry('https://otlp.example.com', { name });
    assert.equal((await create(body('q1'))).status, 200);
    assert.equal((await create(body('q1'))).status, 409);
    assert.equal((await create(body('q2'))).status, 200);
    assert.equal((await create(body('q3'))).status, 200);
    const refused = await create(body('q4'));
    assert.equal(refused.status, 400);
    assert.equal(refused.body.type, 'urn:svc:problem-details:quota-exceeded');
    assert.match(refused.body.detail, /number of telemetries allowed: 3/);
    assert.equal((await create(body('q1'), otherToken)).status, 200, 'another account has a quota and names of its own');
    for (const item of (await svc.api('GET', '/v2/svc/telemetries', { bearer: token })).body.telemetries) {
      await svc.api('DELETE', `/v2/svc/telemetries/${item.telemetryId}`, { bearer: token });
    }
  });

  test("another account's telemetry answers 404 and is not listed; a key without manage_telemetries gets 403", async () => {
    const mine = (await create(otlpTelemetry('https://otlp.example.com', { name: 'mine' }))).body.telemetry;
    assert.equal((await svc.api('GET', `/v2/svc/telemetries/${mine.telemetryId}`, { bearer: otherToken })).status, 404);
    assert.equal((await svc.api('DELETE', `/v2/svc/telemetries/${mine.telemetryId}`, { bearer: otherToken })).status, 404);
    assert.ok(!(await svc.api('GET', '/v2/svc/telemetries', { bearer: otherToken })).text.includes(mine.telemetryId));
    const invoker = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    assert.equal((await svc.api('GET', '/v2/svc/telemetries', { bearer: invoker })).status, 403);
    await svc.api('DELETE', `/v2/svc/telemetries/${mine.telemetryId}`, { bearer: token });
  });

  test("a function's or task's telemetries must name telemetries of its account carrying the signal", async () => {
    const mine = (await create(otlpTelemetry('https://otlp.example.com', { name: 'refs', types: ['LOGS', 'TRACES'] }))).body.telemetry;
    const theirs = (await create(otlpTelemetry('https://otlp.example.com', { name: 'theirs' }), otherToken)).body.telemetry;
    const fn = (telemetries: Record<string, string>, name = 'with-telemetry') =>
      svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name, telemetries }) });

    const foreign = await fn({ logsTelemetryId: theirs.telemetryId });
    assert.equal(foreign.status, 400);
    assert.deepEqual(foreign.body.errors.map((error: any) => error.field), ['telemetries.logsTelemetryId']);
    const unknown = await fn({ tracesTelemetryId: '00000000-0000-4000-8000-000000000000' });
    assert.equal(unknown.status, 400);
    assert.deepEqual(unknown.body.errors.map((error: any) => error.field), ['telemetries.tracesTelemetryId']);
    const wrongSignal = await fn({ metricsTelemetryId: mine.telemetryId });
    assert.equal(wrongSignal.status, 400);
    assert.match(wrongSignal.body.detail, /does not carry METRICS/);

    const accepted = await fn({ logsTelemetryId: mine.telemetryId, tracesTelemetryId: mine.telemetryId });
    assert.equal(accepted.status, 200, accepted.text);
    assert.deepEqual(accepted.body.function.telemetries, { logsTelemetryId: mine.telemetryId, tracesTelemetryId: mine.telemetryId });
    const version = await svc.api('POST', `/v2/svc/functions/${accepted.body.function.id}/versions`, {
      bearer: token, body: echoBody({ name: 'with-telemetry', telemetries: { logsTelemetryId: theirs.telemetryId } }),
    });
    assert.equal(version.status, 400, 'a new version is checked too');

    const taskKey = await svc.apiKey(token, TASK_KEY_SCOPES, { task: true });
    const task = await svc.api('POST', '/v1/svct/tasks', { bearer: taskKey, body: taskBody({ name: 'task-telemetry', telemetries: { logsTelemetryId: theirs.telemetryId } }) });
    assert.equal(task.status, 400, task.text);
    assert.deepEqual(task.body.errors.map((error: any) => error.field), ['telemetries.logsTelemetryId']);
  });
});
