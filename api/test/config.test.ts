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
