// The repository suite, run against both backends: what is written survives a restart, and writers
// racing on the same key resolve as a unique violation the services turn into 409.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createAccountsRepo, type AccountRow } from '../src/control/accounts/repo.ts';
import { createAccountsService } from '../src/control/accounts/service.ts';
import { createSettingsRepo } from '../src/control/installation/repo.ts';
import { createClustersRepo, type ClusterRow } from '../src/control/clusters/repo.ts';
import { createDeploymentsRepo, type DeploymentRow } from '../src/control/deployments/repo.ts';
import { createFunctionsRepo } from '../src/control/functions/repo.ts';
import { createKeysRepo, type CredentialRow } from '../src/control/keys/repo.ts';
import { createRegistryRepo } from '../src/control/registry/repo.ts';
import { createLogger } from '../src/logger.ts';
import { anonymous } from '../src/domain/principal.ts';
import { Problem } from '../src/domain/problem.ts';
import { openDatabase } from '../src/database.ts';
import { UnreadableColumn } from '../src/store/json.ts';
import { isUniqueViolation, type Store } from '../src/store/store.ts';
import { backends, createDatabase, type TestDatabase } from './helpers/databases.ts';

const admin = { ...anonymous, kind: 'admin' as const, ncaId: '*', scopes: new Set(['account_setup']) };

function account(ncaId: string): AccountRow {
  return {
    nca_id: ncaId, name: ncaId, admin_client_ids: [], max_functions: 5, max_tasks: 5, max_telemetries: 5,
    max_registry_credentials: 5, max_instances: 5, max_assets: 5, max_asset_bytes: 5, created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:00.000Z',
  };
}

function credential(id: string, createdAt: string, hash: string | null = null): CredentialRow {
  return {
    id, nca_id: 'acme', kind: hash ? 'api-key' : 'token', secret_hash: hash, owner_type: 'USER', owner_id: 'o',
    issuer_service: 'svc-api', issuer_id: 'svc-api', description: '', audience_service_ids: [],
    authorizations: { policies: [{ scopes: ['list_functions'] }] }, scopes: ['list_functions'], created_at: createdAt,
    expires_at: '2030-01-01T00:00:00.000Z', revoked_at: null,
  };
}

function deployment(id: string, createdAt: string): DeploymentRow {
  return {
    deployment_id: id, function_id: 'f', version_id: `v-${id}`, nca_id: 'acme', created_at: createdAt, updated_at: createdAt,
    specs: [{ gpuSpecificationId: 's', gpu: 'L40', instanceType: 'x', minInstances: 0, maxInstances: 1, maxRequestConcurrency: 1 }],
  };
}

/** A logger whose lines land in `lines`. */
function capturingLogger(lines: { msg: string; err?: { message: string } }[]) {
  return createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line)) } as never);
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
      const limits = { maxFunctions: 1, maxTasks: 1, maxTelemetries: 1, maxRegistryCredentials: 1, maxInstances: 1, maxAssets: 1, maxAssetBytes: 1 };
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

    test('JSON columns: written from values, read back decoded; a partial update leaves the other lists as they were', async () => {
      const at = '2026-01-01T00:00:00.000Z';
      const clusters = createClustersRepo(store.db, createLogger('silent'));
      const cluster: ClusterRow = {
        id: 'c1', nca_id: 'acme', name: 'one', group_id: 'g', group_name: 'group', description: '', cloud_provider: 'ON-PREM', region: 'here',
        authorized_nca_ids: ['*'], capabilities: ['a'], attributes: ['b', 'c'], agent_version: '0.1.0', agent_credential_hash: 'h',
        gpus: [{ name: 'L40', capacity: 2, instanceTypes: [{ name: 'x', default: true }] }], k8s_version: null, last_connected_at: null,
        unisolated_reason: null, created_at: at, updated_at: at,
      };
      await clusters.insert(cluster);
      await clusters.update('c1', { gpus: [{ name: 'H100', instanceTypes: [{ name: 'y' }] }], updated_at: '2026-01-02T00:00:00.000Z' });
      assert.deepEqual(await clusters.findById('c1'), {
        ...cluster, gpus: [{ name: 'H100', instanceTypes: [{ name: 'y' }] }], updated_at: '2026-01-02T00:00:00.000Z',
      });
      const registry = createRegistryRepo(store.db);
      await registry.insert({
        id: 'r1', nca_id: 'acme', name: 'cred', hostname: 'registry.example.com', artifact_types: ['CONTAINER', 'HELM'], tags: ['t'],
        description: '', secret: 'sealed', created_at: at, updated_at: at,
      });
      await registry.update('r1', { tags: ['u', 'v'] });
      const stored = await registry.find('acme', 'r1');
      assert.deepEqual([stored?.artifact_types, stored?.tags], [['CONTAINER', 'HELM'], ['u', 'v']]);
      assert.equal(await registry.sealedSecretFor('acme', 'registry.example.com'), 'sealed');
      assert.equal(await registry.sealedSecretFor('other', 'registry.example.com'), undefined);
      await registry.delete('acme', 'r1');
      await clusters.delete('acme', 'c1');
    });

    test('stored JSON that does not decode: a lookup names table, row and column; a list skips the row with a log line', async () => {
      const lines: { msg: string; err?: { message: string } }[] = [];
      const repo = createDeploymentsRepo(store.db, capturingLogger(lines));
      const versions = createFunctionsRepo(store.db);
      const at = '2026-01-01T00:00:00.000Z';
      const version = (id: string) => ({
        version_id: `v-${id}`, function_id: 'f', nca_id: 'acme', name: 'fn', function_type: 'DEFAULT', status: 'INACTIVE', document: '{}',
        secrets: null, created_at: at, updated_at: at,
      });
      await versions.insertFunction({ id: 'f', nca_id: 'acme', name: 'fn', created_at: at }, version('d1'));
      for (const id of ['d2', 'd3']) await versions.insertVersion(version(id));
      await repo.insert(deployment('d1', '2026-01-01T00:00:00.000Z'));
      await repo.insert(deployment('d2', '2026-01-02T00:00:00.000Z'));
      await store.db.updateTable('deployments').set({ specs: '[{"gpu":7}]' }).where('deployment_id', '=', 'd1').execute();
      await store.db.updateTable('deployments').set({ specs: 'not json' }).where('deployment_id', '=', 'd2').execute();
      await assert.rejects(repo.findById('acme', 'd1'), (error) => error instanceof UnreadableColumn
        && /^deployments d1: column specs does not decode \(.*gpu/.test(error.message));
      await assert.rejects(repo.findById('acme', 'd2'), /^UnreadableColumn: deployments d2: column specs does not decode \(not JSON/);
      await repo.insert(deployment('d3', '2026-01-03T00:00:00.000Z'));
      assert.deepEqual((await repo.listAll()).map((row) => row.deployment_id), ['d3']);
      assert.deepEqual(lines.map((line) => [line.msg, line.err?.message.split(':')[0]]), [
        ['stored row skipped: it does not decode', 'deployments d1'], ['stored row skipped: it does not decode', 'deployments d2'],
      ]);
      await store.db.deleteFrom('deployments').execute();
      for (const id of ['d1', 'd2', 'd3']) await versions.deleteVersion('f', `v-${id}`);
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
