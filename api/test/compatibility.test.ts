// Flows of the real system's own clients (renamed), each asserting what that client reads. The request
// shapes come from the reference CLI (api-key generate --validate, task list --bulk); docs/api.md
// ("Compatibility") lists every flow and any deliberate difference.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TASK_KEY_SCOPES } from './compute/tasks-fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { request } from './helpers/http.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

/** The headers the reference CLI sends to the key service besides Authorization. */
const cliIssuer = { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api' };
const inOneDay = () => new Date(Date.now() + 86_400_000).toISOString().replace(/Z$/, '').slice(0, 23) + 'Z';

describe('the reference clients against this platform', () => {
  let svc: TestPlatform;
  let token: string;

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
  });
  after(() => svc.close());

  test('api-key generate --validate: POST /v1/introspect answers 200 for the key just made, 404 otherwise', async () => {
    // The CLI's generate body, then its validate body: {audience_service_id, key}.
    const policy = {
      aud: 'svc-api', auds: ['svc-api'], product: 'svc-cloud-functions',
      resources: [{ id: '*', type: 'account-functions' }, { id: '*', type: 'authorized-functions' }],
      scopes: ['invoke_function', 'list_functions', 'queue_details', 'list_functions_details'],
    };
    const created = await svc.keys('POST', '/v1/keys', {
      bearer: token, headers: { ...cliIssuer, 'key-owner-id': 'cli-user' },
      body: { description: 'cli key', expires_at: inOneDay(), authorizations: { policies: [policy] }, audience_service_ids: ['svc-api'] },
    });
    assert.equal(created.status, 200, created.text);
    const validate = (key: string, bearer = token, audience = 'svc-api') =>
      svc.keys('POST', '/v1/introspect', { bearer, headers: cliIssuer, body: { audience_service_id: audience, key } });

    const valid = await validate(created.body.value);
    assert.equal(valid.status, 200, valid.text);
    assert.deepEqual(valid.body, {
      owner_type: 'USER', owner_id: 'cli-user', key_id: created.body.id, issuer_service_id: 'svc-api', authorizations: { policies: [policy] },
    });

    assert.equal((await validate(created.body.value, token, 'another-service')).status, 404, 'not meant for that audience');
    assert.equal((await validate('svcapi-not-a-real-key')).status, 404);
    assert.equal((await svc.api('POST', '/v2/svc/accounts/introspect-other', { bearer: await svc.adminToken(), body: {} })).status, 200);
    const otherAccount = await svc.token({ ncaId: 'introspect-other' });
    assert.equal((await validate(created.body.value, otherAccount)).status, 404, "another account's key is not disclosed");
    assert.equal((await svc.keys('DELETE', `/v1/keys/${created.body.id}`, { bearer: token })).status, 204);
    const revoked = await validate(created.body.value);
    assert.equal(revoked.status, 404);
    assert.equal(revoked.headers['content-type'], 'application/problem+json; charset=utf-8');

    const noKey = await svc.keys('POST', '/v1/introspect', { bearer: token, body: { audience_service_id: 'svc-api' } });
    assert.equal(noKey.status, 400);
    assert.equal(noKey.body.errors[0].field, 'key');
    assert.equal((await svc.keys('POST', '/v1/introspect', { body: { key: created.body.value } })).status, 401);
  });

  test('task list with ids that are well-formed but not version-4 UUIDs filters them; garbage is still a 400', async () => {
    const key = await svc.apiKey(token, TASK_KEY_SCOPES, { task: true });
    // The reference CLI's own example id has version nibble 0.
    const bulk = await svc.api('POST', '/v1/svct/tasks/bulk', { bearer: key, body: { taskIds: ['00000000-0000-0000-0000-000000000001'] } });
    assert.equal(bulk.status, 200, bulk.text);
    assert.deepEqual(bulk.body.tasks, []);
    const one = await svc.api('GET', '/v1/svct/tasks/00000000-0000-0000-0000-000000000001', { bearer: key });
    assert.equal(one.status, 404, 'looked up, not refused');
    for (const bad of ['00000000-0000-0000-0000-00000000000g', '0000000-0000-0000-0000-000000000001', 'nope']) {
      const refused = await svc.api('POST', '/v1/svct/tasks/bulk', { bearer: key, body: { taskIds: [bad] } });
      assert.equal(refused.status, 400, bad);
      assert.equal(refused.body.errors[0].field, 'taskIds.0');
    }
  });

  describe('host-routed invocation, as the reference self-hosted CLI invokes', () => {
    let mirror: Deployed;
    let key: string;
    // The CLI's Host for a gateway at localhost: <function id>.invocation.localhost (the platform's default address).
    const invoke = (host: string, method: string, path: string, options: { headers?: Record<string, string>; body?: unknown; bearer?: string } = {}) =>
      request(svc.url, method, path, { host, bearer: options.bearer ?? key, headers: options.headers, body: options.body });

    before(async () => {
      key = await svc.apiKey(token, ['invoke_function', 'list_functions', 'queue_details']);
      mirror = await deploy(svc, token, { inferenceUrl: '/predict', inferencePort: 8000, containerImage: 'test/mirror:1' });
      await waitFor(svc, token, mirror, running);
    });

    test('<function id>.invocation.<address>: method, path, query and body reach the container as sent', async () => {
      // What nvcf-cli's direct invocation sends: POST <inferenceUrl> with a JSON body and Accept */*.
      const posted = await invoke(`${mirror.id}.invocation.localhost`, 'POST', '/predict', { body: { input: 'test' }, headers: { accept: '*/*' } });
      assert.equal(posted.status, 200, posted.text);
      assert.equal(posted.headers['svc-status'], 'fulfilled');
      assert.match(String(posted.headers['svc-reqid']), /^[0-9a-f-]{36}$/);
      assert.equal(posted.body.method, 'POST');
      assert.equal(posted.body.url, '/predict');
      assert.equal(posted.body.body, '{"input":"test"}');
      assert.equal(posted.body.headers['svc-function-id'], mirror.id);
      assert.equal(posted.body.headers['svc-reqid'], posted.headers['svc-reqid']);
      assert.equal(posted.body.headers.authorization, undefined, 'the bearer is the platform\'s, not the function\'s');

      const got = await invoke(`${mirror.id}.invocation.localhost`, 'GET', '/models/a%20b?limit=2&x=y');
      assert.equal(got.status, 200, got.text);
      assert.deepEqual([got.body.method, got.body.url, got.body.body], ['GET', '/models/a%20b?limit=2&x=y', '']);
      assert.equal(got.body.headers['content-type'], undefined, 'no JSON type is made up for a request that had none');
      // As the reference's, a host-routed request stages no input assets: the header is not read.
      const withAssets = await invoke(`${mirror.id}.invocation.localhost`, 'POST', '/x', { headers: { 'svc-input-asset-references': '00000000-0000-0000-0000-0000000000a1' } });
      assert.equal(withAssets.status, 200, withAssets.text);
      assert.equal(withAssets.body.headers['svc-function-asset-ids'], undefined);
      const deleted = await invoke(`${mirror.id}.invocation.localhost`, 'DELETE', '/things/7');
      assert.deepEqual([deleted.status, deleted.body.method, deleted.body.url], [200, 'DELETE', '/things/7']);
    });

    test('the version from the host or the function-id and function-version-id headers; the headers win', async () => {
      const byHost = await invoke(`${mirror.versionId}.${mirror.id}.invocation.localhost`, 'POST', '/x');
      assert.equal(byHost.body.headers['svc-function-version-id'], mirror.versionId);
      const byHeaders = await invoke('invocation.localhost', 'PUT', '/y', { headers: { 'function-id': mirror.id, 'function-version-id': mirror.versionId } });
      assert.deepEqual([byHeaders.status, byHeaders.body.method, byHeaders.body.headers['svc-function-version-id']], [200, 'PUT', mirror.versionId]);
      const otherVersion = '00000000-0000-0000-0000-000000000001';
      const unknownVersion = await invoke(`${otherVersion}.${mirror.id}.invocation.localhost`, 'POST', '/x');
      assert.equal(unknownVersion.status, 404);
      const headerFirst = await invoke(`${otherVersion}.invocation.localhost`, 'POST', '/x', { headers: { 'function-id': mirror.id } });
      assert.equal(headerFirst.body.headers['svc-function-id'], mirror.id);
    });

    test('a container error passes through as it came (no problem+json rewrap); event streams stream', async () => {
      const teapot = await invoke(`${mirror.id}.invocation.localhost`, 'POST', '/teapot');
      assert.equal(teapot.status, 418);
      assert.equal(teapot.headers['content-type'], 'application/json');
      assert.deepEqual(teapot.body, { error: 'short and stout' });
      assert.equal(teapot.headers['svc-status'], 'errored');
      const pexecTeapot = await request(svc.url, 'POST', `/v2/svc/pexec/functions/${mirror.id}`, { host: 'invocation.localhost', bearer: key });
      assert.equal(pexecTeapot.status, 200, 'pexec on the invocation host posts to the inferenceUrl');
      const events = await invoke(`${mirror.id}.invocation.localhost`, 'GET', '/events', { headers: { accept: 'text/event-stream' } });
      assert.equal(events.headers['content-type'], 'text/event-stream');
      assert.equal(events.text, 'data: 1\n\ndata: 2\n\ndata: 3\n\n');
    });

    test('202 after SVC-POLL-SECONDS, then the result (unwrapped) from the status endpoint, once', async () => {
      const accepted = await invoke(`${mirror.id}.invocation.localhost`, 'POST', '/teapot?ms=1500', { headers: { 'svc-poll-seconds': '1' } });
      assert.equal(accepted.status, 202, accepted.text);
      assert.equal(accepted.headers['svc-status'], 'in-progress');
      const requestId = String(accepted.headers['svc-reqid']);
      const status = `/v2/svc/pexec/status/${requestId}`;
      const done = await request(svc.url, 'GET', status, { host: 'invocation.localhost', bearer: key, headers: { 'svc-poll-seconds': '10' } });
      assert.equal(done.status, 418, done.text);
      assert.deepEqual(done.body, { error: 'short and stout' });
      assert.equal((await svc.api('GET', status, { bearer: key })).status, 404, 'the final answer comes once');
    });

    test('refusals: no bearer 401, no invoke scope 403, an unknown function 404, all problem+json; a host that names no function is served by path', async () => {
      const noBearer = await request(svc.url, 'POST', '/predict', { host: `${mirror.id}.invocation.localhost` });
      assert.equal(noBearer.status, 401);
      assert.match(String(noBearer.headers['content-type']), /^application\/problem\+json/);
      const listOnly = await svc.apiKey(token, ['list_functions']);
      assert.equal((await invoke(`${mirror.id}.invocation.localhost`, 'POST', '/predict', { bearer: listOnly })).status, 403);
      const unknown = await invoke('00000000-0000-0000-0000-000000000002.invocation.localhost', 'POST', '/predict');
      assert.equal(unknown.status, 404);
      assert.match(unknown.body.detail, /00000000-0000-0000-0000-000000000002/);
      const notAnId = await invoke('not-an-id.invocation.localhost', 'POST', '/predict');
      assert.equal(notAnId.status, 404);
      assert.match(String(notAnId.headers['content-type']), /^application\/problem\+json/);
      assert.equal((await svc.api('POST', '/v2/svc/accounts/host-routed-other', { bearer: await svc.adminToken(), body: {} })).status, 200);
      const otherAccount = await svc.apiKey(await svc.token({ ncaId: 'host-routed-other' }), ['invoke_function']);
      assert.equal((await invoke(`${mirror.id}.invocation.localhost`, 'POST', '/predict', { bearer: otherAccount })).status, 404, "another account's function is not found");
    });
  });
});
