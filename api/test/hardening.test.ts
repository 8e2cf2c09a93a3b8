// The control plane against a hostile tenant and a careless host (issue 25, item 4): the files it keeps are
// its user's alone, bad input is a 400 naming its field on both stores, and an upload cannot fill the disk.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { backends, createDatabase } from './helpers/databases.ts';
import { FUZZ_CONFIG, fuzz, fuzzTarget } from './helpers/fuzz.ts';
import { request, type TestResponse } from './helpers/http.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { servePlatform } from './helpers/served.ts';

const run = promisify(execFile);
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

for (const backend of await backends()) {
  describe(`bad input on ${backend}: a NUL character anywhere is a 400 naming its field`, () => {
    let svc: TestPlatform;
    let token: string;

    before(async () => {
      svc = await startTestPlatform({ backend, config: FUZZ_CONFIG });
      token = await svc.token();
    });
    after(() => svc.close());

    const fn = (extra: Record<string, unknown>) => ({ name: 'nul', inferenceUrl: '/predict', inferencePort: 8000, containerImage: 'test/echo:1', ...extra });
    const refused = (response: TestResponse, field: string) => {
      assert.equal(response.status, 400, response.text);
      assert.match(String(response.headers['content-type']), /^application\/problem\+json/);
      assert.deepEqual(response.body.errors.map((error: { field: string }) => error.field), [field]);
      assert.match(response.body.detail, /NUL character/);
    };

    test('in a body field, a nested value, an object key, a query value', async () => {
      refused(await svc.api('POST', '/v2/svc/functions', { bearer: token, body: fn({ description: 'a\u0000b' }) }), 'description');
      refused(await svc.api('POST', '/v2/svc/functions', { bearer: token, body: fn({ containerEnvironment: [{ key: 'A', value: '\u0000' }] }) }),
        'containerEnvironment.0.value');
      refused(await svc.api('POST', '/v2/svc/functions', { bearer: token, body: fn({ secrets: [{ name: 's', value: { 'k\u0000': 'v' } }] }) }),
        'secrets.0.value.k\u0000');
      refused(await svc.api('GET', '/v2/svc/functions?cursor=a%00b', { bearer: token }), 'query cursor');
      const listed = await svc.api('GET', '/v2/svc/functions', { bearer: token });
      assert.equal(listed.body.functions.length, 0, 'nothing was stored');
    });

    test('in a header: Node\'s parser refuses the request before any route reads it, answered as problem+json', async () => {
      const answer = await rawRequest(svc.url, `GET /v2/svc/functions HTTP/1.1\r\nHost: api.localhost\r\nAuthorization: Bearer ${token}\r\nX-Odd: a\u0000b\r\n\r\n`);
      assert.match(answer.head, /^HTTP\/1\.1 400 /);
      assert.match(answer.head, /content-type: application\/problem\+json/i);
      assert.match(answer.body.detail, /not valid HTTP/);
    });

    if (backend === 'postgres') {
      test('fuzzed creates and updates (odd strings, lone surrogates, long strings, deep JSON) are never answered 5xx', async () => {
        const report = await fuzz(await fuzzTarget(svc), { requests: 400, seed: 25 });
        assert.deepEqual(report.failures, []);
        const fiveHundreds = [...report.statuses].filter(([status]) => status >= 500);
        assert.deepEqual(fiveHundreds, []);
        assert.ok((report.statuses.get(400) ?? 0) > 100, `mostly refused as bad input: ${JSON.stringify([...report.statuses])}`);
        assert.ok((report.statuses.get(200) ?? 0) > 10, `some odd values are fine and stored: ${JSON.stringify([...report.statuses])}`);
      });
    }
  });
}

/**
 * Sends `text` as it is over a socket (a client library would refuse a NUL or a second Host header) and
 * returns the answer once the server closes; `holdOpen` leaves the request unfinished, as a client sending a
 * large body would.
 */
async function rawRequest(url: string, text: string, options: { holdOpen?: boolean } = {}): Promise<{ head: string; body: any }> {
  const socket = connect(Number(new URL(url).port), '127.0.0.1');
  if (options.holdOpen) socket.write(text);
  else socket.end(text);
  const chunks: Buffer[] = [];
  for await (const chunk of socket) chunks.push(chunk as Buffer);
  const [head, body] = Buffer.concat(chunks).toString('utf8').split('\r\n\r\n');
  return { head, body: body ? JSON.parse(body) : undefined };
}

describe('gateway: a request with two Host headers is refused, on every path', () => {
  let svc: TestPlatform;
  before(async () => {
    svc = await startTestPlatform();
  });
  after(() => svc.close());

  const functionId = '6f1c0e0e-0000-4000-8000-000000000001';
  const twoHosts = (first: string, second: string, line: string, extra = '') =>
    rawRequest(svc.url, `${line}\r\nHost: ${first}\r\nHost: ${second}\r\nContent-Length: 2\r\nContent-Type: application/json\r\n${extra}\r\n{}`);

  test('the API (Express), pexec (lean), a host-routed function and a WebSocket upgrade each answer 400 problem+json', async () => {
    const answers = [
      await twoHosts('api.localhost', 'api-keys.localhost', 'GET /health HTTP/1.1'),
      await twoHosts('localhost', 'evil.example', `POST /v2/svc/pexec/functions/${functionId} HTTP/1.1`),
      await twoHosts(`${functionId}.invocation.localhost`, 'api.localhost', 'POST /predict HTTP/1.1'),
      await twoHosts('api.localhost', 'api.localhost', 'GET /v1/agents/link HTTP/1.1', 'Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n'),
    ];
    for (const answer of answers) {
      assert.match(answer.head, /^HTTP\/1\.1 400 /);
      assert.match(answer.head, /content-type: application\/problem\+json/i);
      assert.match(answer.body.detail, /one Host header/);
    }
    const one = await rawRequest(svc.url, 'GET /health HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n');
    assert.match(one.head, /^HTTP\/1\.1 200 /, 'one Host header is served as before');
  });
});

describe('reserved environment names: a tenant cannot set how a program is loaded or started', () => {
  let svc: TestPlatform;
  let token: string;
  let taskKey: string;

  before(async () => {
    svc = await startTestPlatform({ config: { compute: { inProcessAgent: false } } });
    token = await svc.token();
    taskKey = await svc.apiKey(token, ['launch_task', 'update_secrets'], { task: true });
  });
  after(() => svc.close());

  const env = (...keys: string[]) => keys.map((key) => ({ key, value: '--import=data:text/javascript,process.exit()' }));
  const fn = (extra: Record<string, unknown>) => ({ name: 'env', inferenceUrl: '/predict', inferencePort: 8000, containerImage: 'test/echo:1', ...extra });
  const task = (extra: Record<string, unknown>) => ({ name: 'env', gpuSpecification: { gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x' }, containerImage: 'test/echo:1', ...extra });
  const refused = (response: TestResponse, field: string) => {
    assert.equal(response.status, 400, response.text);
    assert.deepEqual(response.body.errors.map((error: { field: string }) => error.field), [field]);
    assert.match(response.body.errors[0].message, /is reserved/);
  };

  test('in a function\'s and a version\'s containerEnvironment, and in secret names that become variables', async () => {
    refused(await svc.api('POST', '/v2/svc/functions', { bearer: token, body: fn({ containerEnvironment: env('MODE', 'A', 'B', 'NODE_OPTIONS') }) }),
      'containerEnvironment.3.key');
    refused(await svc.api('POST', '/v2/svc/functions', { bearer: token, body: fn({ containerEnvironment: env('LD_PRELOAD') }) }), 'containerEnvironment.0.key');
    refused(await svc.api('POST', '/v2/svc/functions', { bearer: token, body: fn({ secrets: [{ name: 'PYTHONPATH', value: '/tmp' }] }) }), 'secrets.0.name');

    // A secret whose name is no variable name reaches only the secrets file: allowed.
    const made = await svc.api('POST', '/v2/svc/functions', { bearer: token, body: fn({ containerEnvironment: env('MODE'), secrets: [{ name: 'LD_PRELOAD.conf', value: 'x' }] }) });
    assert.equal(made.status, 200, made.text);
    const { id, versionId } = made.body.function;
    refused(await svc.api('POST', `/v2/svc/functions/${id}/versions`, { bearer: token, body: fn({ containerEnvironment: env('PATH') }) }), 'containerEnvironment.0.key');
    refused(await svc.api('PUT', `/v2/svc/secrets/functions/${id}/versions/${versionId}`, { bearer: token, body: { secrets: [{ name: 'ok', value: 'v' }, { name: 'BASH_ENV', value: 'v' }] } }),
      'secrets.1.name');
  });

  test('in a task\'s containerEnvironment and secrets, at launch and when its secrets are replaced', async () => {
    refused(await svc.api('POST', '/v1/svct/tasks', { bearer: taskKey, body: task({ containerEnvironment: env('MODE', 'JAVA_TOOL_OPTIONS') }) }), 'containerEnvironment.1.key');
    refused(await svc.api('POST', '/v1/svct/tasks', { bearer: taskKey, body: task({ secrets: [{ name: 'LD_AUDIT', value: 'x' }] }) }), 'secrets.0.name');
    const launched = await svc.api('POST', '/v1/svct/tasks', { bearer: taskKey, body: task({ containerEnvironment: env('MODE') }) });
    assert.equal(launched.status, 200, launched.text);
    refused(await svc.api('PUT', `/v1/svct/secrets/tasks/${launched.body.task.id}`, { bearer: taskKey, body: { secrets: [{ name: 'NODE_PATH', value: 'x' }] } }), 'secrets.0.name');
  });
});

for (const backend of await backends()) {
  describe(`asset quota on ${backend}: how many assets an account keeps and how many bytes`, () => {
    let svc: TestPlatform;
    let key: string;
    let admin: string;

    before(async () => {
      svc = await startTestPlatform({ backend, config: { assets: { maxBytes: 4096 }, compute: { inProcessAgent: false } } });
      key = await svc.apiKey(await svc.token(), ['invoke_function']);
      admin = await svc.adminToken();
    });
    after(() => svc.close());

    const create = () => svc.api('POST', '/v2/svc/assets', { bearer: key, body: { contentType: 'text/plain', description: 'q' } });
    const uploadPath = (uploadUrl: string) => {
      const url = new URL(uploadUrl);
      return { host: url.hostname, path: url.pathname + url.search };
    };
    const upload = (uploadUrl: string, body: string) => {
      const { host, path } = uploadPath(uploadUrl);
      return request(svc.url, 'PUT', path, { host, body, headers: { 'content-type': 'text/plain' } });
    };
    /** Declares `length` bytes, sends none, and waits for the answer: it comes only if nothing is read first. */
    const declare = (uploadUrl: string, length: number) => {
      const { host, path } = uploadPath(uploadUrl);
      return rawRequest(svc.url, `PUT ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: text/plain\r\nContent-Length: ${length}\r\n\r\n`, { holdOpen: true });
    };

    test('the defaults (1000 assets, 10 GiB) are PATCH-able like the other limits; creating one more than allowed is the quota error', async () => {
      const account = await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: admin });
      assert.deepEqual([account.body.account.maxAssetsAllowed, account.body.account.maxAssetBytesAllowed], [1000, 10 * 1024 ** 3]);
      const patched = await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: admin, body: { maxAssetsAllowed: 2, maxAssetBytesAllowed: 6000 } });
      assert.deepEqual([patched.body.account.maxAssetsAllowed, patched.body.account.maxAssetBytesAllowed], [2, 6000]);
      assert.equal((await create()).status, 200);
      assert.equal((await create()).status, 200);
      const third = await create();
      assert.equal(third.status, 400, third.text);
      assert.match(third.body.type, /quota-exceeded$/);
      assert.match(third.body.detail, /the number of assets allowed: 2/);
    });

    test('an upload past the account\'s bytes or past assets.maxBytes is 413 naming the limit, at once when its length is declared', async () => {
      await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: admin, body: { maxAssetsAllowed: 10, maxAssetBytesAllowed: 6000 } });
      const [first, second] = [(await create()).body, (await create()).body];
      assert.equal((await upload(first.uploadUrl, 'x'.repeat(4000))).status, 200);

      const overAccount = await declare(second.uploadUrl, 3000);
      assert.match(overAccount.head, /^HTTP\/1\.1 413 /);
      assert.match(overAccount.head, /connection: close/i);
      assert.match(overAccount.body.detail, /maxAssetBytesAllowed\); 2000 are left/);
      const overAsset = await declare(second.uploadUrl, 2 * 1024 ** 3);
      assert.match(overAsset.head, /^HTTP\/1\.1 413 /);
      assert.match(overAccount.body.detail, /maxAssetBytesAllowed/, 'the smaller of the two limits is named');

      await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: admin, body: { maxAssetBytesAllowed: 1024 ** 4 } });
      const declaredHuge = await declare(second.uploadUrl, 2 * 1024 ** 3);
      assert.match(declaredHuge.head, /^HTTP\/1\.1 413 /);
      assert.match(declaredHuge.body.detail, /at most 4096 bytes \(assets\.maxBytes\)/);

      // Without a declared length (chunked), the bytes are counted as they come: the refusal comes while the client still sends.
      await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: admin, body: { maxAssetBytesAllowed: 6000 } });
      const { host, path } = uploadPath(second.uploadUrl);
      const chunked = await rawRequest(svc.url, `PUT ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n`
        + `bb8\r\n${'y'.repeat(3000)}\r\n`, { holdOpen: true });
      assert.match(chunked.body.detail, /maxAssetBytesAllowed/);
      assert.match(chunked.head, /^HTTP\/1\.1 413 /);
      assert.equal((await svc.api('GET', `/v2/svc/assets/${second.assetId}`, { bearer: key })).status, 404, 'nothing kept');

      assert.equal((await svc.api('DELETE', `/v2/svc/assets/${first.assetId}`, { bearer: key })).status, 204);
      assert.equal((await upload(second.uploadUrl, 'y'.repeat(3000))).status, 200, 'room again once an asset is gone');

      // 3000 bytes left: two uploads of 2000 at once each find room when they start; at most one is kept.
      const racers = [(await create()).body, (await create()).body];
      const raced = await Promise.all(racers.map((asset) => upload(asset.uploadUrl, 'z'.repeat(2000))));
      assert.ok(raced.filter((answer) => answer.status === 200).length <= 1, raced.map((answer) => answer.status).join());
      for (const answer of raced.filter((refusal) => refusal.status !== 200)) assert.match(answer.body.detail, /maxAssetBytesAllowed/);
    });
  });
}

describe('the bootstrap secret works once, for a day at most, and is printed only while it works', () => {
  const mint = (svc: TestPlatform, bearer: string) => svc.keys('POST', '/v1/admin/keys', { bearer, body: {} });

  test('the first management token spends it, also when two ask at once; an admin token still mints', async () => {
    const svc = await startTestPlatform();
    try {
      assert.match(svc.platform.bootstrapSecret ?? '', /^svcboot-/);
      const both = await Promise.all([mint(svc, svc.bootstrapSecret), mint(svc, svc.bootstrapSecret)]);
      assert.deepEqual(both.map((answer) => answer.status).sort(), [200, 401]);
      const again = await mint(svc, svc.bootstrapSecret);
      assert.equal(again.status, 401);
      assert.match(again.body.detail, /already used or expired/);
      await svc.restart();
      assert.equal(svc.platform.bootstrapSecret, undefined, 'not printed once used');
      assert.equal((await mint(svc, svc.bootstrapSecret)).status, 401, 'still spent after a restart');
      assert.equal((await mint(svc, await svc.adminToken())).status, 200, 'the operator\'s way in from then on');
    } finally {
      await svc.close();
    }
  });

  test('unused, it is printed again at the next start; after 24 hours it is refused and no longer printed', async () => {
    const svc = await startTestPlatform();
    try {
      await svc.restart();
      assert.equal(svc.platform.bootstrapSecret, svc.bootstrapSecret);
      svc.advance(24 * 3600 * 1000 + 1000);
      assert.equal((await mint(svc, svc.bootstrapSecret)).status, 401);
      await svc.restart();
      assert.equal(svc.platform.bootstrapSecret, undefined);
    } finally {
      await svc.close();
    }
  });
});

describe('/metrics: open on loopback only; off loopback it wants a bearer, generated once when none is configured', () => {
  test('a gateway on 0.0.0.0 without metrics.token generates one, keeps it across restarts, and svc metrics token prints it', async () => {
    const svc = await startTestPlatform({ config: { gateway: { host: '0.0.0.0' } } });
    try {
      const token = svc.platform.metricsToken;
      assert.ok(token && token.length >= 32);
      const refused = await svc.api('GET', '/metrics');
      assert.equal(refused.status, 401);
      assert.equal((await svc.api('GET', '/metrics', { bearer: 'metrics-token-wrong-0123456789' })).status, 401);
      assert.equal((await svc.api('GET', '/metrics', { bearer: token })).status, 200);
      await svc.restart();
      assert.equal(svc.platform.metricsToken, token, 'sealed in the store: the same for every start and replica');
      const printed = await run(process.execPath, [path.resolve(import.meta.dirname, '../bin/svc.js'), 'metrics', 'token'], {
        env: { ...process.env, SVC_DATA_DIR: svc.database.dataDir, SVC_CONFIG: '' },
      });
      assert.equal(printed.stdout.trim(), token);
    } finally {
      await svc.close();
    }
  });

  test('svc serve off loopback says that /metrics wants a bearer, and prints neither the bearer nor the bootstrap secret (its output is a log)', async () => {
    const served = await servePlatform({ SVC_HOST: '0.0.0.0' });
    try {
      // servePlatform read the secret with `svc bootstrap secret`; it is not in the output, and it works.
      const banner = readFileSync(path.join(served.dataDir, 'output.log'), 'utf8');
      assert.match(served.bootstrapSecret, /^svcboot-/);
      assert.ok(!banner.includes(served.bootstrapSecret), 'the bootstrap secret is not in the output');
      assert.match(banner, /Bootstrap secret: unused, works once until \S+; .* bootstrap secret prints it/);
      const minted = await request(served.url, 'POST', '/v1/admin/keys', { host: 'api-keys.localhost', bearer: served.bootstrapSecret, body: {} });
      assert.equal(minted.status, 200);
      const spent = await run(process.execPath, [path.resolve(import.meta.dirname, '../bin/svc.js'), 'bootstrap', 'secret'], {
        env: { ...process.env, SVC_DATA_DIR: served.dataDir, SVC_CONFIG: '' },
      }).then(() => undefined, (error: { stderr: string }) => error.stderr);
      assert.match(spent ?? '', /no bootstrap secret works: it was used or has expired/);
      const printed = await run(process.execPath, [path.resolve(import.meta.dirname, '../bin/svc.js'), 'metrics', 'token'], {
        env: { ...process.env, SVC_DATA_DIR: served.dataDir, SVC_CONFIG: '' },
      });
      const token = printed.stdout.trim();
      assert.ok(token.length >= 32, 'a token was generated');
      const output = readFileSync(path.join(served.dataDir, 'output.log'), 'utf8');
      assert.match(output, /\/metrics\s+\(wants a bearer: .* metrics token\)/);
      assert.ok(!output.includes(token), 'the bearer is not in the output');
    } finally {
      await served.stop();
    }
  });

  test('on loopback it answers without one, and a configured token is the one wanted anywhere', async () => {
    const loopback = await startTestPlatform();
    const configured = await startTestPlatform({ config: { gateway: { host: '0.0.0.0' }, metrics: { token: 'metrics-token-configured-0123' } } });
    try {
      assert.equal(loopback.platform.metricsToken, undefined);
      assert.equal((await loopback.api('GET', '/metrics')).status, 200);
      assert.equal(configured.platform.metricsToken, undefined, 'nothing generated');
      assert.equal((await configured.api('GET', '/metrics')).status, 401);
      assert.equal((await configured.api('GET', '/metrics', { bearer: 'metrics-token-configured-0123' })).status, 200);
    } finally {
      await Promise.all([loopback.close(), configured.close()]);
    }
  });
});
