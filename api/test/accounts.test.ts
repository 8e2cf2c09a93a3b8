// Accounts (spec 2.3, 4.2, 5.4, 7, 8): bootstrap at first start and idempotent after, PATCH of only the
// fields present within bounds, admin token rules, and the one quota check.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createAccountsRepo } from '../src/control/accounts/repo.ts';
import { createAccountsService } from '../src/control/accounts/service.ts';
import { Problem } from '../src/domain/problem.ts';
import { openDatabase } from '../src/database.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

describe('accounts', () => {
  let svc: TestPlatform;
  let admin: string;

  before(async () => {
    svc = await startTestPlatform({
      config: {
        api: { accountBootstrap: { limits: { maxFunctions: 7, maxTasks: 8, maxTelemetries: 9, maxRegistryCredentials: 4, maxInstances: 6, maxAssets: 3, maxAssetBytes: 5e9 } } },
      },
    });
    admin = await svc.adminToken();
  });
  after(() => svc.close());

  test('first start creates the default account with the configured limits', async () => {
    const response = await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: admin });
    assert.equal(response.status, 200);
    assert.deepEqual(response.body, {
      account: {
        ncaId: 'svc-default', name: 'svc-default', adminClientIds: ['svc-admin'],
        maxFunctionsAllowed: 7, maxTasksAllowed: 8, maxTelemetriesAllowed: 9, maxRegistryCredentialsAllowed: 4, maxInstancesAllowed: 6,
        maxAssetsAllowed: 3, maxAssetBytesAllowed: 5e9,
      },
    });
  });

  test('PATCH changes only the fields present', async () => {
    const response = await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: admin, body: { maxFunctionsAllowed: 50 } });
    assert.equal(response.status, 200);
    assert.equal(response.body.account.maxFunctionsAllowed, 50);
    assert.equal(response.body.account.maxTasksAllowed, 8);
    const both = await svc.api('PATCH', '/v2/svc/accounts/svc-default', {
      bearer: admin, body: { maxTasksAllowed: 2147483647, maxRegistryCredentialsAllowed: 50 },
    });
    assert.equal(both.body.account.maxTasksAllowed, 2147483647);
    assert.equal(both.body.account.maxRegistryCredentialsAllowed, 50);
    assert.equal(both.body.account.maxFunctionsAllowed, 50);
  });

  test('a restart with other bootstrap limits keeps the existing account as it is', async () => {
    await svc.restart({ api: { accountBootstrap: { limits: { maxFunctions: 1 } } } });
    const response = await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: admin });
    assert.equal(response.body.account.maxFunctionsAllowed, 50);
  });

  test('wrong type, negative or out of range is a 400 naming the field; nothing changes', async () => {
    const cases: [string, unknown][] = [
      ['maxFunctionsAllowed', 'ten'], ['maxFunctionsAllowed', -1], ['maxFunctionsAllowed', 2147483648], ['maxFunctionsAllowed', 1.5],
      ['maxTasksAllowed', -5], ['maxTasksAllowed', 2147483648], ['maxTelemetriesAllowed', 51], ['maxTelemetriesAllowed', null],
      ['maxRegistryCredentialsAllowed', 51], ['maxRegistryCredentialsAllowed', true],
    ];
    for (const [field, value] of cases) {
      const response = await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: admin, body: { maxFunctionsAllowed: 3, [field]: value } });
      assert.equal(response.status, 400, `${field}=${JSON.stringify(value)}`);
      assert.equal(response.headers['content-type'], 'application/problem+json; charset=utf-8');
      assert.equal(response.body.errors[0].field, field);
      assert.ok(response.body.detail.includes(field));
    }
    const unchanged = await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: admin });
    assert.equal(unchanged.body.account.maxFunctionsAllowed, 50);
  });

  test('a body that is not JSON is a 400', async () => {
    const response = await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: admin, body: '{"maxFunctionsAllowed":' });
    assert.equal(response.status, 400);
    assert.equal(response.body.detail, 'Request body is not valid JSON');
  });

  test('a management token is refused with 403; an expired admin token with 401', async () => {
    const token = await svc.token();
    const forbidden = await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: token, body: { maxFunctionsAllowed: 1 } });
    assert.equal(forbidden.status, 403);
    assert.match(forbidden.body.detail, /account_setup/);
    const expired = await svc.adminToken({ expiresInSeconds: 60 });
    svc.advance(120_000);
    const refused = await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: expired, body: { maxFunctionsAllowed: 1 } });
    svc.advance(-120_000);
    assert.equal(refused.status, 401);
    assert.match(refused.body.detail, /expired/);
  });

  test('a key carrying account_setup administers its own account only', async () => {
    const key = await svc.apiKey(await svc.token(), ['invoke_function', 'account_setup']);
    assert.equal((await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: key, body: { maxTelemetriesAllowed: 5 } })).status, 200);
    assert.equal((await svc.api('POST', '/v2/svc/accounts/elsewhere', { bearer: admin, body: { name: 'Elsewhere' } })).status, 200);
    const other = await svc.api('GET', '/v2/svc/accounts/elsewhere', { bearer: key });
    assert.equal(other.status, 403);
    const listed = await svc.api('GET', '/v2/svc/accounts', { bearer: key });
    assert.deepEqual(listed.body.accounts.map((account: { ncaId: string }) => account.ncaId), ['svc-default']);
    assert.equal((await svc.api('POST', '/v2/svc/accounts/mine', { bearer: key, body: {} })).status, 403);
  });

  test('creating an account twice is a 409; an unknown one is a 404', async () => {
    const again = await svc.api('POST', '/v2/svc/accounts/elsewhere', { bearer: admin, body: {} });
    assert.equal(again.status, 409);
    const missing = await svc.api('GET', '/v2/svc/accounts/nowhere', { bearer: admin });
    assert.equal(missing.status, 404);
    const badId = await svc.api('GET', '/v2/svc/accounts/bad!id', { bearer: admin });
    assert.equal(badId.status, 400);
    assert.equal(badId.body.errors[0].field, 'path ncaId');
  });

  test('the quota check names the account and the limit', async () => {
    const store = await openDatabase({ dataDir: svc.database.dataDir, databaseUrl: svc.database.databaseUrl });
    try {
      const accounts = createAccountsService(createAccountsRepo(store.db));
      await accounts.checkQuota('svc-default', 'functions', 49);
      await assert.rejects(accounts.checkQuota('svc-default', 'functions', 50), (error) => {
        assert.ok(error instanceof Problem);
        assert.equal(error.status, 400);
        assert.equal(error.message, "Account 'svc-default': Reached or exceeded the max limit for the number of functions allowed: 50.");
        return true;
      });
      await assert.rejects(accounts.checkQuota('svc-default', 'registryCredentials', 50), /registry credentials allowed: 50\.$/);
    } finally {
      await store.close();
    }
  });
});
