// Functions and versions (spec 2.1, 4.1, 4.6 rule 4; wire-reference 2): every validation rule, listing
// and paging, versions, updates, deletion, secrets that never leave, quotas and account isolation.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { echoBody, streamingBody } from './helpers/fixtures.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

describe('functions', () => {
  let svc: TestPlatform;
  let token: string;
  let reader: string;
  const create = (body: unknown) => svc.api('POST', '/v2/svc/functions', { bearer: token, body });

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
    reader = await svc.apiKey(token, ['list_functions']);
  });
  after(() => svc.close());

  test('create answers 200 with the new INACTIVE version, defaults explicit and null fields omitted', async () => {
    const response = await create(echoBody({ name: 'defaults' }));
    assert.equal(response.status, 200);
    const fn = response.body.function;
    assert.match(fn.id, /^[0-9a-f-]{36}$/);
    assert.match(fn.versionId, /^[0-9a-f-]{36}$/);
    assert.equal(fn.status, 'INACTIVE');
    assert.equal(fn.ncaId, 'svc-default');
    assert.equal(fn.apiBodyFormat, 'CUSTOM');
    assert.equal(fn.functionType, 'DEFAULT');
    assert.deepEqual(fn.health, { protocol: 'HTTP', uri: '/v2/health/ready', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 });
    assert.equal(fn.healthUri, '/v2/health/ready');
    assert.deepEqual(fn.activeInstances, []);
    for (const absent of ['description', 'tags', 'secrets', 'models', 'helmChart', 'containerArgs']) assert.ok(!(absent in fn), absent);
    assert.ok(!response.text.includes('null'));
  });

  test('the deprecated healthUri becomes the health check; enums are case-insensitive', async () => {
    const response = await create(echoBody({ name: 'legacy', healthUri: '/health', apiBodyFormat: 'predict_v2' }));
    assert.equal(response.status, 200);
    assert.equal(response.body.function.health.uri, '/health');
    assert.equal(response.body.function.apiBodyFormat, 'PREDICT_V2');
  });

  test('models-only and helm functions are accepted', async () => {
    assert.equal((await create({ name: 'model-only', inferenceUrl: '/v2/models/m/infer', models: [{ name: 'm', version: '1', uri: 'ngc://m' }] })).status, 200);
    assert.equal((await create({ name: 'helm', inferenceUrl: '/x', helmChart: 'https://helm.example.com/c-1.0.tgz', helmChartServiceName: 'svc' })).status, 200);
  });

  test('every validation rule is a 400 naming the field', async () => {
    const cases: [string, Record<string, unknown>][] = [
      ['name', echoBody({ name: '-leading-dash' })],
      ['name', echoBody({ name: 'has space' })],
      ['name', echoBody({ name: 'x'.repeat(129) })],
      ['name', echoBody({ name: undefined })],
      ['inferenceUrl', echoBody({ inferenceUrl: undefined })],
      ['inferenceUrl', echoBody({ inferenceUrl: 'no-slash' })],
      ['inferencePort', echoBody({ inferencePort: 70000 })],
      ['containerImage', echoBody({ containerImage: undefined })],
      ['containerImage', echoBody({ helmChart: 'https://h.example/c.tgz', helmChartServiceName: 's' })],
      ['containerArgs', { name: 'h', inferenceUrl: '/x', helmChart: 'https://h.example/c.tgz', helmChartServiceName: 's', containerArgs: '--x' }],
      ['containerEnvironment', { name: 'h', inferenceUrl: '/x', helmChart: 'https://h.example/c.tgz', helmChartServiceName: 's', containerEnvironment: [] }],
      ['helmChartServiceName', { name: 'h', inferenceUrl: '/x', helmChart: 'https://h.example/c.tgz' }],
      ['helmChartServiceName', echoBody({ helmChartServiceName: 'orphan' })],
      ['apiBodyFormat', echoBody({ apiBodyFormat: 'XML' })],
      ['functionType', echoBody({ functionType: 'BATCH' })],
      ['health.timeout', echoBody({ health: { protocol: 'HTTP', uri: '/h', port: 8000, timeout: 'ten seconds', expectedStatusCode: 200 } })],
      ['health.protocol', echoBody({ health: { protocol: 'FTP', uri: '/h', port: 8000, timeout: 'PT5S', expectedStatusCode: 200 } })],
      ['health.expectedStatusCode', echoBody({ health: { protocol: 'HTTP', uri: '/h', port: 8000, timeout: 'PT5S' } })],
      ['tags', echoBody({ tags: Array.from({ length: 65 }, (_, i) => `t${i}`) })],
      ['tags.0', echoBody({ tags: ['bad tag!'] })],
      ['tags.0', echoBody({ tags: ['x'.repeat(129)] })],
      ['description', echoBody({ description: 'x'.repeat(257) })],
      ['containerEnvironment.0.key', echoBody({ containerEnvironment: [{ key: '1BAD', value: 'v' }] })],
      ['models.1.name', { name: 'm', inferenceUrl: '/x', models: [{ name: 'a', version: '1', uri: 'u' }, { name: 'a', version: '2', uri: 'u' }] }],
      ['models.0.uri', { name: 'm', inferenceUrl: '/x', models: [{ name: 'a', version: '1' }] }],
      ['secrets.0.name', echoBody({ secrets: [{ name: '.hidden', value: 'v' }] })],
      ['secrets.0.name', echoBody({ secrets: [{ name: 'x'.repeat(49), value: 'v' }] })],
      ['secrets.1.name', echoBody({ secrets: [{ name: 'A', value: 'v' }, { name: 'A', value: 'w' }] })],
      ['rateLimit.rateLimit', echoBody({ rateLimit: { rateLimit: 'fast' } })],
      ['telemetries', echoBody({ telemetries: {} })],
    ];
    for (const [field, body] of cases) {
      const response = await create(body);
      assert.equal(response.status, 400, `${field}: ${response.text}`);
      assert.equal(response.body.type, 'urn:svc:problem-details:validation-failed');
      assert.ok(response.body.errors.some((error: { field: string }) => error.field === field), `${field}: ${JSON.stringify(response.body.errors)}`);
      assert.ok(response.body.detail.includes(field), field);
    }
  });

  test('a missing field reads "is required", in the errors and the detail', async () => {
    const response = await create(echoBody({ name: undefined }));
    assert.equal(response.status, 400);
    assert.deepEqual(response.body.errors, [{ field: 'name', message: 'is required' }]);
    assert.match(response.body.detail, /name: is required/);
  });

  test('STREAMING functions follow spec 4.6 rule 4', async () => {
    assert.equal((await create(streamingBody())).status, 200);
    const custom = streamingBody({
      name: 'stream-custom', inferencePort: 49200,
      containerEnvironment: [{ key: 'CONTROL_SERVER_PORT', value: '9000' }, { key: 'STREAMING_SERVER_PORT', value: '49200' }],
      health: { protocol: 'HTTP', uri: '/v1/streaming/ready', port: 9000, timeout: 'PT10S', expectedStatusCode: 200 },
    });
    assert.equal((await create(custom)).status, 200, 'ports follow the container environment');
    const cases: [string, Record<string, unknown>][] = [
      ['health', streamingBody({ name: 's1', health: undefined })],
      ['health.uri', streamingBody({ name: 's2', health: { protocol: 'HTTP', uri: '/health', port: 8011, timeout: 'PT10S', expectedStatusCode: 200 } })],
      ['health.port', streamingBody({ name: 's3', health: { protocol: 'HTTP', uri: '/v1/streaming/ready', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 } })],
      ['inferencePort', streamingBody({ name: 's4', inferencePort: 8000 })],
    ];
    for (const [field, body] of cases) {
      const response = await create(body);
      assert.equal(response.status, 400, field);
      assert.equal(response.body.errors[0].field, field);
      assert.match(response.body.errors[0].message, /STREAMING|streaming/);
    }
  });

  test('versions: a new version of an existing function; its name and type must match', async () => {
    const first = (await create(echoBody({ name: 'versioned' }))).body.function;
    const second = await svc.api('POST', `/v2/svc/functions/${first.id}/versions`, { bearer: token, body: echoBody({ name: 'versioned', containerImage: 'local/echo:2' }) });
    assert.equal(second.status, 200);
    assert.equal(second.body.function.id, first.id);
    assert.notEqual(second.body.function.versionId, first.versionId);
    const versions = await svc.api('GET', `/v2/svc/functions/${first.id}/versions`, { bearer: reader });
    assert.deepEqual(versions.body.functions.map((fn: { versionId: string }) => fn.versionId).sort(), [first.versionId, second.body.function.versionId].sort());

    const renamed = await svc.api('POST', `/v2/svc/functions/${first.id}/versions`, { bearer: token, body: echoBody({ name: 'other' }) });
    assert.equal(renamed.status, 400);
    assert.equal(renamed.body.errors[0].field, 'name');
    const retyped = await svc.api('POST', `/v2/svc/functions/${first.id}/versions`, { bearer: token, body: streamingBody({ name: 'versioned' }) });
    assert.equal(retyped.status, 400);
    assert.equal(retyped.body.errors[0].field, 'functionType');
    const missing = await svc.api('POST', '/v2/svc/functions/00000000-0000-4000-8000-000000000000/versions', { bearer: token, body: echoBody() });
    assert.equal(missing.status, 404);
  });

  test('a second function with the same name is a 409, also when two requests race', async () => {
    const results = await Promise.all([create(echoBody({ name: 'racer' })), create(echoBody({ name: 'racer' }))]);
    assert.deepEqual(results.map((response) => response.status).sort(), [200, 409]);
    assert.equal((await create(echoBody({ name: 'racer' }))).status, 409);
  });

  test('get, ids, and visibility', async () => {
    const fn = (await create(echoBody({ name: 'lookup' }))).body.function;
    const got = await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}?includeSecrets=true`, { bearer: reader });
    assert.equal(got.status, 200);
    assert.deepEqual(got.body.function, fn);
    const ids = await svc.api('GET', '/v2/svc/functions/ids', { bearer: reader });
    assert.ok(ids.body.functionIds.includes(fn.id));
    assert.equal(new Set(ids.body.functionIds).size, ids.body.functionIds.length, 'one id per function');
    const onlyPublic = await svc.api('GET', '/v2/svc/functions?visibility=public', { bearer: reader });
    assert.deepEqual(onlyPublic.body.functions, [], 'nothing is public');
    const privateToo = await svc.api('GET', '/v2/svc/functions?visibility=authorized,private', { bearer: reader });
    assert.ok(privateToo.body.functions.some((item: { id: string }) => item.id === fn.id));
    const bad = await svc.api('GET', '/v2/svc/functions?visibility=everyone', { bearer: reader });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.errors[0].field, 'query visibility.0');
    assert.equal((await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/not-a-uuid`, { bearer: reader })).status, 400);
  });

  test('listing pages through every version exactly once', async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await svc.api('GET', `/v2/svc/functions?limit=3${cursor ? `&cursor=${cursor}` : ''}`, { bearer: reader });
      assert.equal(page.status, 200);
      assert.ok(page.body.functions.length <= 3);
      seen.push(...page.body.functions.map((fn: { versionId: string }) => fn.versionId));
      cursor = page.body.cursor;
    } while (cursor);
    const all = await svc.api('GET', '/v2/svc/functions', { bearer: reader });
    assert.deepEqual(seen, all.body.functions.map((fn: { versionId: string }) => fn.versionId));
    assert.equal(new Set(seen).size, seen.length);
  });

  test('update (both PUT paths) changes tags and description; an empty update is a 400', async () => {
    const fn = (await create(echoBody({ name: 'tagged' }))).body.function;
    const path = `/functions/${fn.id}/versions/${fn.versionId}`;
    const updated = await svc.api('PUT', `/v2/svc${path}`, { bearer: token, body: { tags: ['team:a'], description: 'echoes' } });
    assert.equal(updated.status, 200);
    assert.deepEqual(updated.body.function.tags, ['team:a']);
    const metadata = await svc.api('PUT', `/v2/svc/metadata${path}`, { bearer: token, body: { tags: ['team:b'] } });
    assert.deepEqual(metadata.body.function.tags, ['team:b']);
    assert.equal(metadata.body.function.description, 'echoes');
    const empty = await svc.api('PUT', `/v2/svc${path}`, { bearer: token, body: {} });
    assert.equal(empty.status, 400);
  });

  test('delete answers 204, then 404', async () => {
    const fn = (await create(echoBody({ name: 'doomed' }))).body.function;
    const path = `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`;
    assert.equal((await svc.api('DELETE', path, { bearer: token })).status, 204);
    assert.equal((await svc.api('GET', path, { bearer: token })).status, 404);
    assert.equal((await svc.api('DELETE', path, { bearer: token })).status, 404);
    assert.equal((await create(echoBody({ name: 'doomed' }))).status, 200, 'the name is free again');
  });

  test('secret values are never returned or logged; only their names', async () => {
    const planted = 'planted-secret-value-7f3a';
    const fn = (await create(echoBody({ name: 'secretive', secrets: [{ name: 'API_KEY', value: planted }, { name: 'JSON', value: { nested: planted } }] }))).body.function;
    assert.deepEqual(fn.secrets, ['API_KEY', 'JSON']);
    const path = `/functions/${fn.id}/versions/${fn.versionId}`;
    assert.equal((await svc.api('PUT', `/v2/svc/secrets${path}`, { bearer: token, body: { secrets: [{ name: 'OTHER', value: `${planted}-2` }] } })).status, 204);
    const responses = [
      await svc.api('GET', `/v2/svc${path}?includeSecrets=true`, { bearer: token }),
      await svc.api('GET', '/v2/svc/functions', { bearer: token }),
      await svc.api('GET', `/v2/svc/functions/${fn.id}/versions`, { bearer: token }),
    ];
    assert.deepEqual(responses[0].body.function.secrets, ['API_KEY', 'JSON', 'OTHER']);
    for (const response of responses) assert.ok(!response.text.includes(planted));
    const badSecrets = await svc.api('PUT', `/v2/svc/secrets${path}`, { bearer: token, body: { secrets: [] } });
    assert.equal(badSecrets.status, 400);
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.ok(!svc.logs.join('\n').includes(planted), 'no secret in any log line');
  });
});

describe('function quotas and account isolation', () => {
  let svc: TestPlatform;
  let token: string;
  let otherToken: string;

  before(async () => {
    svc = await startTestPlatform({ config: { api: { accountBootstrap: { limits: { maxFunctions: 2 } } } } });
    token = await svc.token();
    assert.equal((await svc.api('POST', '/v2/svc/accounts/other', { bearer: await svc.adminToken(), body: {} })).status, 200);
    otherToken = await svc.token({ ncaId: 'other' });
  });
  after(() => svc.close());

  test('the limit counts functions, not versions; the error names account and limit', async () => {
    const first = (await svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name: 'q1' }) })).body.function;
    assert.equal((await svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name: 'q2' }) })).status, 200);
    const refused = await svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name: 'q3' }) });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.type, 'urn:svc:problem-details:quota-exceeded');
    assert.equal(refused.body.detail, "Account 'svc-default': Reached or exceeded the max limit for the number of functions allowed: 2.");
    const version = await svc.api('POST', `/v2/svc/functions/${first.id}/versions`, { bearer: token, body: echoBody({ name: 'q1' }) });
    assert.equal(version.status, 200, 'a version is not a new function');
    await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: await svc.adminToken(), body: { maxFunctionsAllowed: 3 } });
    assert.equal((await svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name: 'q3' }) })).status, 200);
  });

  test("another account's functions answer 404 and never appear in its lists", async () => {
    const fn = (await svc.api('GET', '/v2/svc/functions', { bearer: token })).body.functions[0];
    const path = `/functions/${fn.id}/versions/${fn.versionId}`;
    assert.equal((await svc.api('GET', `/v2/svc${path}`, { bearer: otherToken })).status, 404);
    assert.equal((await svc.api('GET', `/v2/svc/functions/${fn.id}/versions`, { bearer: otherToken })).status, 404);
    assert.equal((await svc.api('PUT', `/v2/svc${path}`, { bearer: otherToken, body: { tags: ['x'] } })).status, 404);
    assert.equal((await svc.api('PUT', `/v2/svc/secrets${path}`, { bearer: otherToken, body: { secrets: [{ name: 'A', value: 'b' }] } })).status, 404);
    assert.equal((await svc.api('DELETE', `/v2/svc${path}`, { bearer: otherToken })).status, 404);
    assert.equal((await svc.api('POST', `/v2/svc/functions/${fn.id}/versions`, { bearer: otherToken, body: echoBody({ name: fn.name }) })).status, 404);
    assert.equal((await svc.api('GET', `/v2/svc/deployments${path}`, { bearer: otherToken })).status, 404);
    assert.deepEqual((await svc.api('GET', '/v2/svc/functions', { bearer: otherToken })).body.functions, []);
    assert.deepEqual((await svc.api('GET', '/v2/svc/functions/ids', { bearer: otherToken })).body.functionIds, []);
    assert.equal((await svc.api('POST', '/v2/svc/functions', { bearer: otherToken, body: echoBody({ name: fn.name }) })).status, 200, 'names are per account');
    assert.equal((await svc.api('GET', `/v2/svc${path}`, { bearer: token })).status, 200);
  });

  test('functions survive a restart', async () => {
    const before = (await svc.api('GET', '/v2/svc/functions', { bearer: token })).body.functions;
    await svc.restart();
    assert.deepEqual((await svc.api('GET', '/v2/svc/functions', { bearer: token })).body.functions, before);
  });
});
