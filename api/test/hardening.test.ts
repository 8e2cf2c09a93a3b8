// The control plane against a hostile tenant and a careless host (issue 25, item 4): the files it keeps are
// its user's alone, bad input is a 400 naming its field on both stores, and an upload cannot fill the disk.
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createDatabase } from './helpers/databases.ts';
import { request } from './helpers/http.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

const modeOf = (file: string) => statSync(file).mode & 0o777;

/** Every file under `dir`, however deep. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true }).filter((entry) => entry.isFile())
    .map((entry) => path.join(entry.parentPath, entry.name));
}

describe('files: the data dir and the blob store are the platform user\'s alone', () => {
  let svc: TestPlatform;
  let dataDir: string;

  before(async () => {
    const database = await createDatabase('sqlite');
    dataDir = database.dataDir;
    // A data dir and blob store left world-readable by an older version or an operator's mkdir.
    chmodSync(dataDir, 0o755);
    mkdirSync(path.join(dataDir, 'blobs'), { mode: 0o755 });
    chmodSync(path.join(dataDir, 'blobs'), 0o755);
    svc = await startTestPlatform({ database });
  });
  after(async () => {
    await svc.close();
    await svc.database.drop();
  });

  /** Writes to the store (its WAL) and an asset's bytes to the blob store. */
  async function write() {
    const token = await svc.token();
    const key = await svc.apiKey(token, ['invoke_function']);
    const created = await svc.api('POST', '/v2/svc/assets', { bearer: key, body: { contentType: 'text/plain', description: 'x' } });
    const url = new URL(created.body.uploadUrl);
    const stored = await request(svc.url, 'PUT', url.pathname + url.search, { host: url.hostname, body: 'bytes', headers: { 'content-type': 'text/plain' } });
    assert.equal(stored.status, 200, stored.text);
  }

  function assertPrivate() {
    assert.equal(modeOf(dataDir), 0o700, 'data dir');
    for (const name of ['svc.db', 'svc.db-wal', 'svc.db-shm', 'secrets.key', 'admin-signing-key.pem']) {
      assert.equal(modeOf(path.join(dataDir, name)), 0o600, name);
    }
    assert.equal(modeOf(path.join(dataDir, 'blobs')), 0o700, 'blob store');
    const blobs = filesUnder(path.join(dataDir, 'blobs'));
    assert.ok(blobs.length > 0, 'an asset was stored');
    for (const file of blobs) assert.equal(modeOf(file), 0o600, file);
  }

  test('a start tightens a loose data dir and blob store; the store, its WAL and SHM, keys and blobs are 0600 after writes', async () => {
    await write();
    assertPrivate();
  });

  test('files an older version left 0644 in a 0755 dir are tightened at the next start', async () => {
    await svc.platform.close();
    chmodSync(dataDir, 0o755);
    for (const name of ['svc.db', 'svc.db-wal', 'svc.db-shm']) {
      try {
        chmodSync(path.join(dataDir, name), 0o644);
      } catch {
        // SQLite removes its WAL and SHM when the last connection closes cleanly.
      }
    }
    chmodSync(path.join(dataDir, 'blobs'), 0o755);
    await svc.restart();
    await write();
    assertPrivate();
  });
});
