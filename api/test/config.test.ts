// Configuration mistakes stop the platform with one line naming the setting at fault.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.ts';
import { loadSecretBox } from '../src/control/installation/service.ts';
import { createSettingsRepo } from '../src/control/installation/repo.ts';
import { openDatabase } from '../src/database.ts';
import { tempDir } from './helpers/databases.ts';

function yamlConfig(text: string): NodeJS.ProcessEnv {
  const file = path.join(tempDir(), 'svc.yaml');
  writeFileSync(file, text);
  return { SVC_CONFIG: file };
}

function configError(env: NodeJS.ProcessEnv): string {
  try {
    loadConfig(env);
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    assert.equal(error.message.split('\n').length, 1);
    return error.message;
  }
  assert.fail('the configuration was accepted');
}

describe('configuration errors', () => {
  test('an unknown key in the YAML file is refused with its path, and the key it was probably meant to be', () => {
    const env = yamlConfig('gatewy:\n  port: 9000\n');
    assert.equal(configError(env), `unknown setting gatewy in ${env.SVC_CONFIG} (did you mean gateway?)`);
    assert.match(configError(yamlConfig('gateway:\n  prot: 9000\n')), /^unknown setting gateway\.prot in .* \(did you mean port\?\)$/);
    assert.match(configError(yamlConfig('compute:\n  localCluster:\n    gpus:\n      - name: L40\n        capacty: 2\n        instanceTypes: [{ name: x }]\n')),
      /^unknown setting compute\.localCluster\.gpus\.0\.capacty in /);
    assert.match(configError(yamlConfig('autoscaler:\n  scalingIntervalMS: 1000\n')), /^unknown setting autoscaler\.scalingIntervalMS in .*did you mean scalingIntervalMs\?/);
    // Every documented section is known.
    assert.equal(loadConfig(yamlConfig('gateway:\n  port: 9000\nguard:\n  maxHeapMb: 512\ndemoProxy:\n  host: 127.0.0.1\n')).gateway.port, 9000);
  });

  test('a database URL that is not PostgreSQL is refused, and the line does not repeat its password', () => {
    const message = configError({ SVC_DATABASE_URL: 'mysql://svc:hunter2@db.example/svc' });
    assert.match(message, /^invalid setting store\.databaseUrl \(SVC_DATABASE_URL\): must be a postgres:\/\/ or postgresql:\/\/ URL/);
    assert.ok(!message.includes('hunter2'));
    assert.equal(loadConfig({ SVC_DATABASE_URL: 'postgresql://svc@db.example/svc' }).store.databaseUrl, 'postgresql://svc@db.example/svc');
  });

  test('NATS settings: one kind of credential, pairs together, TLS files only with tls://, a prefix NATS can use; no line repeats a secret', () => {
    const nats = { SVC_NATS_URL: 'nats://nats.example:4222' };
    assert.equal(configError({ ...nats, SVC_NATS_USER: 'svc' }), 'invalid setting invocation.natsPassword (SVC_NATS_PASSWORD): natsUser and natsPassword go together');
    const two = configError({ ...nats, SVC_NATS_TOKEN: 'hunter2-token', SVC_NATS_CREDS_FILE: '/etc/svc/nats.creds' });
    assert.match(two, /^invalid setting invocation\.natsCredsFile \(SVC_NATS_CREDS_FILE\): one NATS credential .*, not natsToken and natsCredsFile$/);
    assert.ok(!two.includes('hunter2'));
    assert.equal(configError({ ...nats, SVC_NATS_TLS_CA_FILE: '/etc/svc/ca.pem' }), 'invalid setting invocation.natsUrl (SVC_NATS_URL): the natsTls* settings need a tls:// URL');
    assert.match(configError({ SVC_NATS_URL: 'tls://nats.example', SVC_NATS_TLS_CERT_FILE: '/c.pem' }), /^invalid setting invocation\.natsTlsKeyFile \(SVC_NATS_TLS_KEY_FILE\): /);
    assert.match(configError({ SVC_NATS_URL: 'tls://nats.example', SVC_NATS_TLS_INSECURE: 'yes' }), /^invalid setting invocation\.natsTlsInsecure \(SVC_NATS_TLS_INSECURE\): /);
    assert.match(configError({ SVC_NATS_PREFIX: 'svc.prod' }), /^invalid setting invocation\.natsPrefix \(SVC_NATS_PREFIX\): /);
    const inUrl = configError({ SVC_NATS_URL: 'nats://svc:hunter2@nats.example:4222' });
    assert.match(inUrl, /^invalid setting invocation\.natsUrl \(SVC_NATS_URL\): must be nats:\/\/host\[:port\] or tls:\/\/host\[:port\]$/);
    assert.ok(!inUrl.includes('hunter2'));
    const { natsUrl, natsPrefix, natsUser, natsTlsCaFile, natsTlsInsecure } = loadConfig({
      SVC_NATS_URL: 'tls://nats.example:4222', SVC_NATS_PREFIX: 'staging', SVC_NATS_USER: 'svc', SVC_NATS_PASSWORD: 'p', SVC_NATS_TLS_CA_FILE: '/etc/svc/ca.pem',
    }).invocation;
    assert.deepEqual({ natsUrl, natsPrefix, natsUser, natsTlsCaFile, natsTlsInsecure },
      { natsUrl: 'tls://nats.example:4222', natsPrefix: 'staging', natsUser: 'svc', natsTlsCaFile: '/etc/svc/ca.pem', natsTlsInsecure: false });
  });

  test('placement: true, false or elected; elected only on PostgreSQL and NATS', () => {
    assert.equal(loadConfig({}).compute.placement, true);
    assert.equal(loadConfig({ SVC_PLACEMENT: 'false' }).compute.placement, false);
    assert.equal(configError({ SVC_PLACEMENT: 'elected' }),
      'compute.placement (SVC_PLACEMENT) elected needs PostgreSQL and NATS (store.databaseUrl, invocation.natsUrl): replicas elect over the one and relay agent links over the other');
    const shared = { SVC_PLACEMENT: 'elected', SVC_DATABASE_URL: 'postgres://svc@db.example/svc', SVC_NATS_URL: 'nats://nats.example:4222' };
    assert.match(configError(shared), /^compute\.placement \(SVC_PLACEMENT\) elected runs no in-process agent: set compute\.localCluster\.enabled \(SVC_LOCAL_CLUSTER\) false/);
    const elected = loadConfig({ ...shared, SVC_LOCAL_CLUSTER: 'false' }).compute;
    assert.deepEqual([elected.placement, elected.placementLeaseMs], ['elected', 5000]);
    assert.equal(configError({ SVC_PLACEMENT: 'elcted' }), 'invalid setting compute.placement (SVC_PLACEMENT): must be true, false or elected');
    assert.match(configError({ SVC_PLACEMENT_LEASE_MS: '10' }), /^invalid setting compute\.placementLeaseMs \(SVC_PLACEMENT_LEASE_MS\): /);
    assert.equal(configError({ SVC_RESULT_KEEPERS: 'off' }), 'invalid setting invocation.resultKeepers (SVC_RESULT_KEEPERS): must be true or false');
    assert.equal(loadConfig({ SVC_RESULT_KEEPERS: 'false' }).invocation.resultKeepers, false);
    assert.equal(loadConfig({}).invocation.resultKeepers, true);
  });

  test('a store sealed with another key: the line names the key that was used, SVC_SECRETS_KEY only when it was set', async () => {
    const dataDir = tempDir();
    const store = await openDatabase({ dataDir });
    try {
      const settings = createSettingsRepo(store.db);
      const now = '2026-01-01T00:00:00.000Z';
      await loadSecretBox(settings, { key: randomBytes(32).toString('base64'), previousKeys: [], dataDir, now });
      // No key configured: the generated file in the data directory is what does not match.
      await assert.rejects(loadSecretBox(settings, { previousKeys: [], dataDir, now }), (error: Error) => {
        assert.equal(error.message, `${path.join(dataDir, 'secrets.key')} (the generated secrets key) does not match the key this store was sealed with; a store sealed elsewhere needs that installation's key (docs/security.md)`);
        return true;
      });
      await assert.rejects(loadSecretBox(settings, { key: randomBytes(32).toString('base64'), previousKeys: [], dataDir, now }),
        { message: /^secrets\.key \(SVC_SECRETS_KEY\) does not match the key this store was sealed with/ });
    } finally {
      await store.close();
    }
  });
});
