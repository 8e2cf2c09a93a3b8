// The scope matrix (spec 5.2, 5.3): every endpoint that exists × every credential type → 200/401/403.
// Expectations are written out here from the spec, not derived from the routes' own declarations.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

type Credential = 'none' | 'token' | 'apiKey' | 'taskKey' | 'admin' | 'bootstrap' | 'setupKey';
type Expect = Partial<Record<Credential, number>> & { default: number };

interface Row {
  method: string;
  path: string;
  host: 'api' | 'keys';
  body?: unknown;
  headers?: Record<string, string>;
  expect: Expect;
}

const keyHeaders = { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'matrix' };
const keyBody = () => ({ expires_at: new Date(Date.now() + 3_600_000).toISOString(), authorizations: { policies: [{ scopes: ['list_functions'] }] } });
const publicRoute: Expect = { default: 200 };
const accountAdmin: Expect = { default: 403, none: 401, admin: 200, setupKey: 200 };
const managementTokenOnly: Expect = { default: 403, none: 401, token: 200 };

const rows: Row[] = [
    { method: 'GET', path: '/admin/health/liveness', host: 'api', expect: publicRoute },
    { method: 'GET', path: '/admin/health/readiness', host: 'api', expect: publicRoute },
    { method: 'GET', path: '/health', host: 'api', expect: publicRoute },
    { method: 'GET', path: '/v3/openapi', host: 'api', expect: publicRoute },
    { method: 'GET', path: '/v3/openapi', host: 'keys', expect: publicRoute },
    { method: 'GET', path: '/.well-known/jwks.json', host: 'keys', expect: publicRoute },
    { method: 'GET', path: '/v2/svc/whoami', host: 'api', expect: { default: 200, none: 401, bootstrap: 403 } },
    { method: 'GET', path: '/v2/svc/accounts', host: 'api', expect: accountAdmin },
    { method: 'GET', path: '/v2/svc/accounts/svc-default', host: 'api', expect: accountAdmin },
    { method: 'PATCH', path: '/v2/svc/accounts/svc-default', host: 'api', body: { maxTasksAllowed: 20 }, expect: accountAdmin },
    // Creating accounts needs an installation administrator; an account_setup key is bound to its own.
    { method: 'POST', path: '/v2/svc/accounts/{fresh}', host: 'api', body: {}, expect: { default: 403, none: 401, admin: 200 } },
    { method: 'POST', path: '/v1/admin/keys', host: 'keys', body: {}, expect: { default: 403, none: 401, bootstrap: 200 } },
    { method: 'POST', path: '/v1/keys', host: 'keys', headers: keyHeaders, body: keyBody(), expect: managementTokenOnly },
    { method: 'GET', path: '/v1/keys', host: 'keys', expect: managementTokenOnly },
    { method: 'GET', path: '/v1/keys/{key}', host: 'keys', expect: managementTokenOnly },
    { method: 'DELETE', path: '/v1/keys/{key}', host: 'keys', expect: { default: 403, none: 401, token: 204 } },
];

describe('scope matrix', () => {
  let svc: TestPlatform;
  const bearers = {} as Record<Credential, string | undefined>;
  let token: string;

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
    Object.assign(bearers, {
      none: undefined,
      token,
      apiKey: await svc.apiKey(token, ['invoke_function', 'list_functions', 'queue_details', 'list_functions_details']),
      taskKey: await svc.apiKey(token, ['launch_task', 'list_tasks', 'task_details', 'cancel_task', 'delete_task', 'list_events', 'list_results', 'update_secrets'], { task: true }),
      admin: await svc.adminToken(),
      bootstrap: svc.bootstrapSecret,
      setupKey: await svc.apiKey(token, ['account_setup']),
    });
  });
  after(() => svc.close());

  test('every endpoint answers each credential type as the spec says', async () => {
    let fresh = 0;
    const failures: string[] = [];
    for (const credential of Object.keys(bearers) as Credential[]) {
      for (const row of rows) {
        // {key}: a key of its own for each call, so DELETE always has something to delete.
        const key = row.path.includes('{key}')
          ? (await svc.keys('POST', '/v1/keys', { bearer: token, headers: keyHeaders, body: keyBody() })).body.id
          : '';
        const path = row.path.replace('{fresh}', `matrix-${fresh++}`).replace('{key}', key);
        const call = row.host === 'api' ? svc.api : svc.keys;
        const response = await call(row.method, path, { bearer: bearers[credential], headers: row.headers, body: row.body });
        const expected = row.expect[credential] ?? row.expect.default;
        if (response.status !== expected) failures.push(`${credential} ${row.method} ${path}: ${response.status}, expected ${expected}`);
        if (response.status === 401) assert.equal(response.headers['www-authenticate'], 'Bearer');
        if (response.status >= 400) assert.equal(response.body.status, response.status, 'problem+json');
      }
    }
    assert.deepEqual(failures, []);
  });

  test('a 403 names the missing scope', async () => {
    const key = await svc.apiKey(token, ['invoke_function']);
    const response = await svc.api('GET', '/v2/svc/accounts', { bearer: key });
    assert.equal(response.status, 403);
    assert.equal(response.body.detail, "The credential lacks scope 'account_setup'");
  });
});
