// The key service: management tokens from the bootstrap secret, API keys with their required headers
// and body, shown once, listed, revoked everywhere within a second, and expired by the clock.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

const issuerHeaders = { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'alice@example.com' };
const inOneDay = () => new Date(Date.now() + 86_400_000).toISOString().replace(/\.\d{3}Z$/, 'Z');
const validBody = () => ({
  description: 'invocation key',
  expires_at: inOneDay(),
  audience_service_ids: ['svc-api'],
  authorizations: { policies: [{ aud: 'svc-api', product: 'svc-cloud-functions', resources: [{ id: '*', type: 'account-functions' }], scopes: ['invoke_function', 'list_functions'] }] },
});

describe('key service', () => {
  let svc: TestPlatform;
  let token: string;

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
  });
  after(() => svc.close());

  test('the bootstrap secret mints a management JWT with the default admin issuer scopes', async () => {
    const response = await svc.keys('POST', '/v1/admin/keys', { bearer: svc.bootstrapSecret, body: {} });
    assert.equal(response.status, 200);
    assert.equal(response.body.type, 'SVC_TOKEN');
    assert.equal(response.body.status, 'ACTIVE');
    assert.equal(response.body.value.split('.').length, 3, 'a JWT');
    assert.deepEqual(response.body.authorizations.policies[0].scopes, [
      'register_function', 'list_functions', 'list_functions_details', 'deploy_function', 'update_function',
      'update_secrets', 'delete_function', 'manage_telemetries', 'manage_registry_credentials', 'cluster-management',
    ]);
  });

  test('a wrong bootstrap secret, or none, is a 401 with WWW-Authenticate', async () => {
    for (const bearer of ['svcboot-not-the-secret', undefined]) {
      const response = await svc.keys('POST', '/v1/admin/keys', { bearer, body: {} });
      assert.equal(response.status, 401);
      assert.equal(response.headers['www-authenticate'], 'Bearer');
      assert.equal(response.headers['content-type'], 'application/problem+json; charset=utf-8');
    }
  });

  test('POST /v1/keys returns the key once, with owner, issuer, audience and expiry', async () => {
    const body = validBody();
    const response = await svc.keys('POST', '/v1/keys', { bearer: token, headers: issuerHeaders, body });
    assert.equal(response.status, 200);
    const key = response.body;
    assert.match(key.value, /^svcapi-[A-Za-z0-9_-]{64}$/);
    assert.equal(key.type, 'SVC_API_KEY');
    assert.equal(key.owner_id, 'alice@example.com');
    assert.equal(key.issuer_service, 'svc-api');
    assert.deepEqual(key.audience_service_ids, ['svc-api']);
    assert.equal(key.expires_at, new Date(body.expires_at).toISOString());
    assert.deepEqual(key.authorizations, body.authorizations);

    const fetched = await svc.keys('GET', `/v1/keys/${key.id}`, { bearer: token });
    assert.equal(fetched.status, 200);
    assert.equal(fetched.body.value, undefined, 'the value is never shown again');
    const listed = await svc.keys('GET', '/v1/keys', { bearer: token });
    assert.ok(listed.body.keys.some((item: { id: string }) => item.id === key.id));
    assert.ok(listed.body.keys.every((item: { value?: string }) => item.value === undefined));
  });

  test('the key works as a bearer and carries exactly its scopes', async () => {
    const key = await svc.apiKey(token, ['list_functions']);
    const response = await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: key });
    assert.equal(response.status, 403);
    assert.match(response.body.detail, /account_setup/);
  });

  test('each missing required header is a 400 naming it', async () => {
    for (const header of Object.keys(issuerHeaders)) {
      const headers: Record<string, string> = { ...issuerHeaders };
      delete headers[header];
      const response = await svc.keys('POST', '/v1/keys', { bearer: token, headers, body: validBody() });
      assert.equal(response.status, 400, header);
      assert.equal(response.body.errors[0].field, `header ${header}`);
      assert.ok(response.body.detail.includes(header));
    }
  });

  test('body errors are 400s naming the field', async () => {
    const cases: [string, (body: any) => void][] = [
      ['expires_at', (body) => delete body.expires_at],
      ['expires_at', (body) => { body.expires_at = '2030-01-01 00:00:00'; }],
      ['expires_at', (body) => { body.expires_at = '2020-01-01T00:00:00Z'; }],
      ['authorizations', (body) => delete body.authorizations],
      ['authorizations.policies', (body) => { body.authorizations.policies = []; }],
      ['authorizations.policies.0.scopes', (body) => delete body.authorizations.policies[0].scopes],
      ['authorizations.policies.0.scopes', (body) => { body.authorizations.policies[0].scopes = []; }],
      ['authorizations.policies.0.scopes.0', (body) => { body.authorizations.policies[0].scopes = ['fly']; }],
    ];
    for (const [field, mutate] of cases) {
      const body = validBody();
      mutate(body);
      const response = await svc.keys('POST', '/v1/keys', { bearer: token, headers: issuerHeaders, body });
      assert.equal(response.status, 400, `${field}: ${response.text}`);
      assert.equal(response.body.type, 'urn:svc:problem-details:validation-failed');
      assert.equal(response.body.errors[0].field, field);
    }
  });

  test('task keys are issued for the tasks product', async () => {
    const response = await svc.keys('POST', '/v1/keys', {
      bearer: token,
      headers: { ...issuerHeaders, 'key-issuer-service': 'svct-api' },
      body: { ...validBody(), authorizations: { policies: [{ product: 'svc-cloud-tasks', scopes: ['list_tasks'] }] } },
    });
    assert.equal(response.body.type, 'SVC_TASK_API_KEY');
  });

  test('an API key cannot mint keys; only the management token can', async () => {
    const key = await svc.apiKey(token, ['list_functions']);
    const response = await svc.keys('POST', '/v1/keys', { bearer: key, headers: issuerHeaders, body: validBody() });
    assert.equal(response.status, 403);
  });

  test('a revoked key is refused within one second', async () => {
    const key = await svc.apiKey(token, ['account_setup']);
    assert.equal((await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: key })).status, 200);
    const id = (await svc.keys('GET', '/v1/keys', { bearer: token })).body.keys[0].id;
    assert.equal((await svc.keys('DELETE', `/v1/keys/${id}`, { bearer: token })).status, 204);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const refused = await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: key });
    assert.equal(refused.status, 401);
    assert.match(refused.body.detail, /revoked/);
    assert.equal((await svc.keys('GET', `/v1/keys/${id}`, { bearer: token })).body.status, 'REVOKED');
  });

  test('a revoked management token is refused too', async () => {
    const second = await svc.keys('POST', '/v1/admin/keys', { bearer: await svc.adminToken(), body: {} });
    assert.equal((await svc.keys('DELETE', `/v1/keys/${second.body.id}`, { bearer: token })).status, 204);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    assert.equal((await svc.keys('GET', '/v1/keys', { bearer: second.body.value })).status, 401);
  });

  test('a forged or tampered credential is a 401', async () => {
    const key = await svc.apiKey(token, ['account_setup']);
    const tampered = key.slice(0, 10) + (key[10] === 'A' ? 'B' : 'A') + key.slice(11);
    for (const bearer of [tampered, token.slice(0, -4) + 'AAAA', 'eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.', 'garbage']) {
      const response = await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer });
      assert.equal(response.status, 401, bearer);
    }
  });

  test('keys of another account are not found', async () => {
    const key = await svc.keys('POST', '/v1/keys', { bearer: token, headers: issuerHeaders, body: validBody() });
    const created = await svc.api('POST', '/v2/svc/accounts/other', { bearer: await svc.adminToken(), body: {} });
    assert.equal(created.status, 200);
    const otherToken = await svc.token({ ncaId: 'other' });
    assert.equal((await svc.keys('GET', `/v1/keys/${key.body.id}`, { bearer: otherToken })).status, 404);
    assert.equal((await svc.keys('DELETE', `/v1/keys/${key.body.id}`, { bearer: otherToken })).status, 404);
    const listed = await svc.keys('GET', '/v1/keys', { bearer: otherToken });
    assert.ok(listed.body.keys.every((item: { nca_id: string }) => item.nca_id === 'other'));
    assert.equal((await svc.keys('GET', `/v1/keys/${key.body.id}`, { bearer: token })).status, 200);
  });

  test('list pages with a cursor; a foreign cursor is a 400 naming it', async () => {
    const first = await svc.keys('GET', '/v1/keys?limit=2', { bearer: token });
    assert.equal(first.body.keys.length, 2);
    assert.ok(first.body.cursor);
    const second = await svc.keys('GET', `/v1/keys?limit=2&cursor=${first.body.cursor}`, { bearer: token });
    assert.equal(second.status, 200);
    assert.notDeepEqual(second.body.keys.map((k: { id: string }) => k.id), first.body.keys.map((k: { id: string }) => k.id));
    const bad = await svc.keys('GET', '/v1/keys?cursor=nonsense', { bearer: token });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.errors[0].field, 'query cursor');
  });

  test('the JWKS publishes the public key that verifies management tokens', async () => {
    const response = await svc.keys('GET', '/.well-known/jwks.json');
    assert.equal(response.status, 200);
    assert.equal(response.body.keys[0].kty, 'EC');
    assert.equal(response.body.keys[0].d, undefined, 'no private part');
  });
});

describe('credential expiry', () => {
  let svc: TestPlatform;
  before(async () => {
    svc = await startTestPlatform();
  });
  after(() => svc.close());

  test('an expired API key and an expired management token are 401s', async () => {
    const token = await svc.token();
    const key = await svc.apiKey(token, ['account_setup'], { expiresAt: new Date(Date.now() + 60_000).toISOString() });
    assert.equal((await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: key })).status, 200);
    svc.advance(13 * 3_600_000);
    const keyResponse = await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: key });
    assert.equal(keyResponse.status, 401);
    assert.match(keyResponse.body.detail, /expired/);
    const tokenResponse = await svc.keys('GET', '/v1/keys', { bearer: token });
    assert.equal(tokenResponse.status, 401);
    assert.match(tokenResponse.body.detail, /expired/);
  });
});
