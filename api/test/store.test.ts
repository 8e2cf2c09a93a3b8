// The repository suite, run against both backends: what is written survives a restart, and writers
// racing on the same key resolve as a unique violation the services turn into 409.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createAccountsRepo, type AccountRow } from '../src/control/accounts/repo.ts';
import { createAccountsService } from '../src/control/accounts/service.ts';
import { createSettingsRepo } from '../src/control/installation/repo.ts';
import { createKeysRepo, type CredentialRow } from '../src/control/keys/repo.ts';
import { anonymous } from '../src/http/auth.ts';
import { Problem } from '../src/http/problem.ts';
import { openDatabase } from '../src/database.ts';
import { isUniqueViolation, type Store } from '../src/store/store.ts';
import { backends, createDatabase, type TestDatabase } from './helpers/databases.ts';

const admin = { ...anonymous, kind: 'admin' as const, ncaId: '*', scopes: new Set(['account_setup']) };

function account(ncaId: string): AccountRow {
  return {
    nca_id: ncaId, name: ncaId, admin_client_ids: '[]', max_functions: 5, max_tasks: 5, max_telemetries: 5,
    max_registry_credentials: 5, max_instances: 5, created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:00.000Z',
  };
}

function credential(id: string, createdAt: string, hash: string | null = null): CredentialRow {
  return {
    id, nca_id: 'acme', kind: hash ? 'api-key' : 'token', secret_hash: hash, owner_type: 'USER', owner_id: 'o',
    issuer_service: 'svc-api', issuer_id: 'svc-api', description: '', audience_service_ids: '[]',
    authorizations: '{"policies":[]}', scopes: '["list_functions"]', created_at: createdAt,
    expires_at: '2030-01-01T00:00:00.000Z', revoked_at: null,
  };
}

for (const backend of await backends()) {
  describe(`store on ${backend}`, () => {
    let database: TestDatabase;
    let store: Store;
    const open = () => openDatabase({ dataDir: database.dataDir, databaseUrl: database.databaseUrl });

    before(async () => {
      database = await createDatabase(backend);
      store = await open();
    });
    after(async () => {
      await store.close();
      await database.drop();
    });

    test('reports its dialect and answers a ping', async () => {
      assert.equal(store.dialect, backend);
      await store.ping();
    });

    test('accounts: insert, find, update, list', async () => {
      const repo = createAccountsRepo(store.db);
      await repo.insert(account('acme'));
      assert.equal((await repo.find('acme'))?.max_functions, 5);
      const updated = await repo.update('acme', { max_functions: 9 });
      assert.equal(updated?.max_functions, 9);
      assert.deepEqual((await repo.list()).map((row) => row.nca_id), ['acme']);
      assert.equal(await repo.find('nobody'), undefined);
    });

    test('a second insert of the same account is a unique violation', async () => {
      const repo = createAccountsRepo(store.db);
      await assert.rejects(repo.insert(account('acme')), (error) => isUniqueViolation(error));
    });

    test('two concurrent creates of one account: one succeeds, the other is a 409', async () => {
      const service = createAccountsService(createAccountsRepo(store.db));
      const limits = { maxFunctions: 1, maxTasks: 1, maxTelemetries: 1, maxRegistryCredentials: 1, maxInstances: 1 };
      const results = await Promise.allSettled([
        service.create(admin, 'racer', {}, limits),
        service.create(admin, 'racer', {}, limits),
      ]);
      assert.equal(results.filter((result) => result.status === 'fulfilled').length, 1);
      const rejected = results.find((result) => result.status === 'rejected') as PromiseRejectedResult;
      assert.ok(rejected.reason instanceof Problem);
      assert.equal(rejected.reason.status, 409);
    });

    test('credentials: lookup by hash and id, pages newest first, revoke once', async () => {
      const repo = createKeysRepo(store.db);
      for (let i = 0; i < 5; i++) {
        await repo.insert(credential(`00000000-0000-0000-0000-00000000000${i}`, `2026-01-0${i + 1}T00:00:00.000Z`, `hash-${i}`));
      }
      assert.equal((await repo.findBySecretHash('hash-3'))?.id, '00000000-0000-0000-0000-000000000003');
      assert.equal(await repo.findBySecretHash('missing'), undefined);
      const first = await repo.listByAccount('acme', 2);
      assert.deepEqual(first.map((row) => row.id.slice(-1)), ['4', '3']);
      const last = first[1];
      const second = await repo.listByAccount('acme', 2, { createdAt: last.created_at, id: last.id });
      assert.deepEqual(second.map((row) => row.id.slice(-1)), ['2', '1']);
      assert.equal(await repo.revoke('acme', first[0].id, '2026-02-01T00:00:00.000Z'), true);
      assert.equal(await repo.revoke('acme', first[0].id, '2026-02-02T00:00:00.000Z'), false, 'already revoked');
      assert.equal(await repo.revoke('other', first[1].id, '2026-02-01T00:00:00.000Z'), false, 'another account');
      await assert.rejects(repo.insert(credential('dup', '2026-01-09T00:00:00.000Z', 'hash-0')), (error) => isUniqueViolation(error));
    });

    test('settings: racing first writers agree on one value', async () => {
      const settings = createSettingsRepo(store.db);
      const results = await Promise.all(['a', 'b', 'c'].map((value) => settings.getOrCreate('race', () => value, '2026-01-01T00:00:00.000Z')));
      assert.equal(new Set(results.map((result) => result.value)).size, 1);
      assert.equal(results.filter((result) => result.created).length, 1);
    });

    test('a restart loses nothing', async () => {
      await store.close();
      store = await open();
      assert.equal((await createAccountsRepo(store.db).find('acme'))?.max_functions, 9);
      assert.equal((await createKeysRepo(store.db).findById('00000000-0000-0000-0000-000000000004'))?.revoked_at, '2026-02-01T00:00:00.000Z');
      assert.ok(await createSettingsRepo(store.db).get('race'));
    });
  });
}

describe('secrets key ring', () => {
  test('a wrong key fails at start; a rotation keeps old data readable and retires the old key', async () => {
    const { loadSecretBox } = await import('../src/control/installation/service.ts');
    const { randomBytes } = await import('node:crypto');
    const database = await createDatabase('sqlite');
    const store = await openDatabase({ dataDir: database.dataDir });
    try {
      const settings = createSettingsRepo(store.db);
      const [oldKey, newKey] = [randomBytes(32).toString('base64'), randomBytes(32).toString('base64')];
      const now = '2026-01-01T00:00:00.000Z';
      const first = await loadSecretBox(settings, { key: oldKey, previousKeys: [], dataDir: database.dataDir, now });
      const sealed = first.encrypt('planted-secret');
      assert.ok(!sealed.includes('planted-secret'));
      await assert.rejects(loadSecretBox(settings, { key: newKey, previousKeys: [], dataDir: database.dataDir, now }), /does not match/);
      const rotated = await loadSecretBox(settings, { key: newKey, previousKeys: [oldKey], dataDir: database.dataDir, now });
      assert.equal(rotated.decrypt(sealed), 'planted-secret');
      const resealed = rotated.encrypt('planted-secret');
      const retired = await loadSecretBox(settings, { key: newKey, previousKeys: [], dataDir: database.dataDir, now });
      assert.equal(retired.decrypt(resealed), 'planted-secret');
      assert.throws(() => retired.decrypt(sealed), /no secrets key/);
    } finally {
      await store.close();
      await database.drop();
    }
  });
});
