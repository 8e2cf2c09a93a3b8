// The scope matrix (spec 5.2, 5.3): every endpoint that exists × every credential type → 200/401/403.
// Expectations are written out here from the spec, not derived from the routes' own declarations.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { echoBody, localSpec } from './helpers/fixtures.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

type Credential = 'none' | 'token' | 'apiKey' | 'taskKey' | 'admin' | 'bootstrap' | 'setupKey';
type Expect = Partial<Record<Credential, number>> & { default: number };

interface Row {
  method: string;
  /** {fid} {vid} {deploymentId} {specId} {rcId} {telemetryId} {clusterId} {key} {keyValue} {fresh} are filled per call (path and body). */
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
/** Rule 1: SVC_TOKEN or SVC_API_KEY with the scope; the default API key holds the list scopes only. */
const listing: Expect = { default: 403, none: 401, token: 200, apiKey: 200 };
const managing = (status = 200): Expect => ({ default: 403, none: 401, token: status });
const version = '/functions/{fid}/versions/{vid}';

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
    { method: 'POST', path: '/v1/keys', host: 'keys', headers: keyHeaders, body: keyBody(), expect: managementTokenOnly },
    { method: 'GET', path: '/v1/keys', host: 'keys', expect: managementTokenOnly },
    { method: 'GET', path: '/v1/keys/{key}', host: 'keys', expect: managementTokenOnly },
    { method: 'DELETE', path: '/v1/keys/{key}', host: 'keys', expect: { default: 403, none: 401, token: 204 } },
    { method: 'POST', path: '/v1/introspect', host: 'keys', body: { key: '{keyValue}' }, expect: managementTokenOnly },
    { method: 'GET', path: '/v2/svc/functions', host: 'api', expect: listing },
    { method: 'GET', path: '/v2/svc/functions/ids', host: 'api', expect: listing },
    { method: 'GET', path: '/v2/svc/functions/{fid}/versions', host: 'api', expect: listing },
    { method: 'GET', path: `/v2/svc${version}`, host: 'api', expect: listing },
    { method: 'POST', path: '/v2/svc/functions', host: 'api', body: echoBody({ name: '{fresh}' }), expect: managing() },
    { method: 'POST', path: '/v2/svc/functions/{fid}/versions', host: 'api', body: echoBody({ name: '{name}' }), expect: managing() },
    { method: 'PUT', path: `/v2/svc${version}`, host: 'api', body: { tags: ['a'] }, expect: managing() },
    { method: 'PUT', path: `/v2/svc/metadata${version}`, host: 'api', body: { tags: ['a'] }, expect: managing() },
    { method: 'DELETE', path: `/v2/svc${version}`, host: 'api', expect: managing(204) },
    { method: 'PUT', path: `/v2/svc/secrets${version}`, host: 'api', body: { secrets: [{ name: 'A', value: 'b' }] }, expect: managing(204) },
    { method: 'POST', path: `/v2/svc/deployments${version}`, host: 'api', body: { deploymentSpecifications: [localSpec()] }, expect: managing() },
    { method: 'GET', path: `/v2/svc/deployments${version}?deployed`, host: 'api', expect: managing() },
    { method: 'PUT', path: `/v2/svc/deployments${version}?deployed`, host: 'api', body: { deploymentSpecifications: [{ gpu: 'LOCAL', minInstances: 0, maxInstances: 1 }] }, expect: managing() },
    { method: 'DELETE', path: `/v2/svc/deployments${version}?deployed`, host: 'api', expect: managing() },
    { method: 'GET', path: '/v2/svc/deployments/{deploymentId}', host: 'api', expect: managing() },
    { method: 'PATCH', path: '/v2/svc/deployments/{deploymentId}/gpu-specifications/{specId}', host: 'api', body: { maxInstances: 3 }, expect: managing() },
    { method: 'GET', path: '/v2/svc/clusterGroups', host: 'api', expect: managing() },
    { method: 'GET', path: '/v2/svc/registry-credentials', host: 'api', expect: managing() },
    { method: 'POST', path: '/v2/svc/registry-credentials', host: 'api', body: { registryHostname: 'nvcr.io', secret: { name: '{fresh}', value: 'eDp5' } }, expect: managing() },
    { method: 'GET', path: '/v2/svc/registry-credentials/{rcId}', host: 'api', expect: managing() },
    { method: 'PATCH', path: '/v2/svc/registry-credentials/{rcId}', host: 'api', body: { description: 'd' }, expect: managing() },
    { method: 'DELETE', path: '/v2/svc/registry-credentials/{rcId}', host: 'api', expect: managing(204) },
    { method: 'GET', path: '/v2/svc/recognized-registries', host: 'api', expect: managing() },
    { method: 'GET', path: '/v2/svc/telemetries', host: 'api', expect: managing() },
    { method: 'POST', path: '/v2/svc/telemetries', host: 'api', body: { name: '{fresh}', endpoint: 'https://otlp.example.com', provider: 'GRAFANA_CLOUD', types: ['TRACES'], secret: { name: 's', value: 'v' } }, expect: managing() },
    { method: 'GET', path: '/v2/svc/telemetries/{telemetryId}', host: 'api', expect: managing() },
    { method: 'DELETE', path: '/v2/svc/telemetries/{telemetryId}', host: 'api', expect: managing(204) },
    { method: 'GET', path: '/v1/accounts/svc-default/clusters', host: 'api', expect: managing() },
    { method: 'POST', path: '/v1/accounts/svc-default/clusters', host: 'api', body: { clusterName: '{fresh}', clusterGroupName: 'g' }, expect: managing() },
    { method: 'GET', path: '/v1/accounts/svc-default/clusters/{clusterId}', host: 'api', expect: managing() },
    { method: 'PUT', path: '/v1/accounts/svc-default/clusters/{clusterId}', host: 'api', body: { region: 'r' }, expect: managing() },
    { method: 'DELETE', path: '/v1/accounts/svc-default/clusters/{clusterId}', host: 'api', expect: managing(204) },
    { method: 'GET', path: '/v1/accounts/svc-default/clusterVersions', host: 'api', expect: managing() },
    // invoke_function and queue_details are API-key scopes; the default management token holds neither.
    // The version is not deployed, so a caller that passes authorization gets 404.
    { method: 'POST', path: '/v2/svc/pexec/functions/{fid}', host: 'api', body: {}, expect: { default: 403, none: 401, apiKey: 404 } },
    { method: 'POST', path: `/v2/svc/pexec${version}`, host: 'api', body: {}, expect: { default: 403, none: 401, apiKey: 404 } },
    { method: 'GET', path: '/v2/svc/pexec/status/00000000-0000-4000-8000-000000000000', host: 'api', expect: { default: 403, none: 401, apiKey: 404 } },
    { method: 'GET', path: '/v2/svc/queues/00000000-0000-4000-8000-000000000000/position', host: 'api', expect: { default: 403, none: 401, apiKey: 404 } },
    { method: 'GET', path: '/v2/svc/queues/functions/{fid}', host: 'api', expect: { default: 403, none: 401, apiKey: 200 } },
    { method: 'GET', path: '/v2/svc/queues/functions/{fid}/versions/{vid}', host: 'api', expect: { default: 403, none: 401, apiKey: 200 } },
    // Last: the bootstrap secret works once, so every row before it meets it unused.
    { method: 'POST', path: '/v1/admin/keys', host: 'keys', body: {}, expect: { default: 403, none: 401, bootstrap: 200, admin: 200 } },
];

describe('scope matrix', () => {
  let svc: TestPlatform;
  const bearers = {} as Record<Credential, string | undefined>;
  let token: string;

  before(async () => {
    svc = await startTestPlatform({ config: { api: { accountBootstrap: { limits: { maxFunctions: 10_000, maxRegistryCredentials: 50, maxTelemetries: 50 } } } } });
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
        // Every call gets resources of its own, so deletes always have something to delete.
        const ids = await resourcesFor(`${row.path} ${JSON.stringify(row.body ?? {})}`, `matrix-${fresh++}`);
        const fill = (text: string) => text.replace(/\{(\w+)\}/g, (match, name: string) => ids[name] ?? match);
        const path = fill(row.path).replace('?deployed', '');
        const body = row.body === undefined ? undefined : JSON.parse(fill(JSON.stringify(row.body)));
        const call = row.host === 'api' ? svc.api : svc.keys;
        const response = await call(row.method, path, { bearer: bearers[credential], headers: row.headers, body });
        const expected = row.expect[credential] ?? row.expect.default;
        if (response.status !== expected) failures.push(`${credential} ${row.method} ${path}: ${response.status}, expected ${expected}`);
        if (response.status === 401) assert.equal(response.headers['www-authenticate'], 'Bearer');
        if (response.status >= 400) assert.equal(response.body.status, response.status, 'problem+json');
      }
    }
    assert.deepEqual(failures, []);
  });

  async function resourcesFor(path: string, fresh: string): Promise<Record<string, string>> {
    const ids: Record<string, string> = { fresh, name: fresh };
    if (/\{key(Value)?\}/.test(path)) {
      const key = (await svc.keys('POST', '/v1/keys', { bearer: token, headers: keyHeaders, body: keyBody() })).body;
      Object.assign(ids, { key: key.id, keyValue: key.value });
    }
    if (/\{(fid|vid|deploymentId|specId)\}/.test(path)) {
      const fn = (await svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name: fresh }) })).body.function;
      Object.assign(ids, { fid: fn.id, vid: fn.versionId });
      if (path.includes('?deployed') || /deploymentId|specId/.test(path)) {
        const deployment = (await svc.api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
          bearer: token, body: { deploymentSpecifications: [localSpec()] },
        })).body.deployment;
        Object.assign(ids, { deploymentId: deployment.deploymentId, specId: deployment.deploymentSpecifications[0].gpuSpecificationId });
      }
    }
    if (path.includes('{rcId}')) {
      ids.rcId = (await svc.api('POST', '/v2/svc/registry-credentials', {
        bearer: token, body: { registryHostname: 'nvcr.io', secret: { name: fresh, value: 'eDp5' } },
      })).body.registryCredential.registryCredentialId;
    }
    if (path.includes('{telemetryId}')) {
      ids.telemetryId = (await svc.api('POST', '/v2/svc/telemetries', {
        bearer: token, body: { name: fresh, endpoint: 'https://otlp.example.com', provider: 'GRAFANA_CLOUD', types: ['TRACES'], secret: { name: 's', value: 'v' } },
      })).body.telemetry.telemetryId;
    }
    if (path.includes('{clusterId}')) {
      ids.clusterId = (await svc.api('POST', '/v1/accounts/svc-default/clusters', { bearer: token, body: { clusterName: fresh, clusterGroupName: 'g' } })).body.clusterId;
    }
    return ids;
  }

  test("every route under /v1/accounts/{ncaId} refuses another account's token with 403", async () => {
    await svc.api('POST', '/v2/svc/accounts/stranger', { bearer: await svc.adminToken(), body: {} });
    const stranger = await svc.token({ ncaId: 'stranger' });
    const failures: string[] = [];
    let fresh = 0;
    for (const row of rows.filter((candidate) => candidate.path.startsWith('/v1/accounts/svc-default/'))) {
      const ids = await resourcesFor(row.path, `stranger-${fresh++}`);
      const fill = (text: string) => text.replace(/\{(\w+)\}/g, (match, name: string) => ids[name] ?? match);
      const body = row.body === undefined ? undefined : JSON.parse(fill(JSON.stringify(row.body)));
      const path = fill(row.path);
      const response = await svc.api(row.method, path, { bearer: stranger, body });
      if (response.status !== 403) failures.push(`${row.method} ${path}: ${response.status}`);
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
