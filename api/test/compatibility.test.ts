// Flows of the real system's own clients (renamed), each asserting what that client reads. The request
// shapes come from the reference CLI (api-key generate --validate, task list --bulk); docs/api.md
// ("Compatibility") lists every flow and any deliberate difference.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TASK_KEY_SCOPES } from './compute/tasks-fixtures.ts';
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
});
