// The gateway: Host routing, request ids, problem+json on every error path, TLS, redacted logs, and the
// health endpoints.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import selfsigned from 'selfsigned';
import { backends, POSTGRES_ADMIN_URL, tempDir } from './helpers/databases.ts';
import { request } from './helpers/http.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { AGENT_LINK_PATH } from '../src/compute/protocol.ts';

const uuid = /^[0-9a-f-]{36}$/;

/** A WebSocket upgrade the server refuses: its HTTP answer (an upgrade it accepts fails the test). */
function upgradeRefusal(baseUrl: string, path: string, bearer: string): Promise<{ status: number; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(path, baseUrl), {
      headers: { host: 'api.localhost', connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', authorization: `Bearer ${bearer}` },
    });
    req.on('response', (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, headers: res.headers });
    });
    req.on('upgrade', (_res, socket) => {
      socket.destroy();
      reject(new Error('the upgrade was accepted'));
    });
    req.on('error', reject);
    req.end();
  });
}

function assertProblem(response: { status: number; headers: Record<string, unknown>; body: any }, status: number, instance: string) {
  assert.equal(response.status, status);
  assert.equal(response.headers['content-type'], 'application/problem+json; charset=utf-8');
  assert.deepEqual(Object.keys(response.body).filter((key) => key !== 'errors').sort(), ['detail', 'instance', 'requestId', 'status', 'title', 'type']);
  assert.equal(response.body.status, status);
  assert.equal(response.body.instance, instance);
  assert.match(response.body.requestId, uuid);
  assert.match(response.body.type, /^urn:svc:problem-details:[a-z-]+$/);
  assert.ok(!/\bat .+:\d+:\d+/.test(JSON.stringify(response.body)), 'no stack trace');
}

describe('gateway', () => {
  let svc: TestPlatform;
  before(async () => {
    svc = await startTestPlatform();
  });
  after(() => svc.close());

  test('api.<address> and a bare localhost reach the main API; api-keys.<address> the key service', async () => {
    assert.equal((await svc.api('GET', '/admin/health/liveness')).status, 200);
    assert.equal((await request(svc.url, 'GET', '/admin/health/liveness')).status, 200);
    assert.equal((await request(svc.url, 'GET', '/admin/health/liveness', { host: '127.0.0.1' })).status, 200);
    assert.equal((await svc.keys('GET', '/.well-known/jwks.json')).status, 200);
    assert.equal((await svc.api('GET', '/.well-known/jwks.json')).status, 404, 'key service routes are not on the api host');
    assert.equal((await svc.keys('GET', '/admin/health/liveness')).status, 404);
  });

  test('any other host is a 404 problem naming the hosts served', async () => {
    const response = await request(svc.url, 'GET', '/v2/svc/functions', { host: 'invalid.example.com' });
    assertProblem(response, 404, '/v2/svc/functions');
    assert.match(response.body.detail, /api\.localhost, api-keys\.localhost and invocation\.localhost/);
    assert.equal(response.headers['x-request-id'], response.body.requestId);
  });

  test('every response carries a request id; problems repeat it', async () => {
    const ok = await svc.api('GET', '/admin/health/liveness');
    assert.match(String(ok.headers['x-request-id']), uuid);
    const missing = await svc.api('GET', '/no/such/route');
    assertProblem(missing, 404, '/no/such/route');
    assert.equal(missing.headers['x-request-id'], missing.body.requestId);
  });

  test('error paths are problem+json: 401, 403, 400 bad JSON, 413, 415, 400 validation', async () => {
    const admin = await svc.adminToken();
    assertProblem(await svc.api('GET', '/v2/svc/accounts'), 401, '/v2/svc/accounts');
    assertProblem(await svc.api('GET', '/v2/svc/accounts', { bearer: await svc.token() }), 403, '/v2/svc/accounts');
    assertProblem(await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: admin, body: '{oops' }), 400, '/v2/svc/accounts/svc-default');
    const big = JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) });
    assertProblem(await svc.api('PATCH', '/v2/svc/accounts/svc-default', { bearer: admin, body: big }), 413, '/v2/svc/accounts/svc-default');
    assertProblem(await svc.api('PATCH', '/v2/svc/accounts/svc-default', {
      bearer: admin, body: 'maxFunctionsAllowed=3', headers: { 'content-type': 'text/plain' },
    }), 415, '/v2/svc/accounts/svc-default');
    const invalid = await svc.api('PATCH', '/v2/svc/accounts/svc-default?x=1', { bearer: admin, body: { maxTasksAllowed: -1 } });
    assertProblem(invalid, 400, '/v2/svc/accounts/svc-default');
    assert.deepEqual(invalid.body.errors, [{ field: 'maxTasksAllowed', message: 'Too small: expected number to be >=0' }]);
  });

  test('a body with 100,000 invalid items gets a small 400: the first errors, then how many there were', async () => {
    const body = JSON.stringify({
      name: 'many', inferenceUrl: '/x', containerImage: 'local/echo:1', rateLimit: { rateLimit: '10-S', exemptedNcaIds: Array.from({ length: 100_000 }, () => 1) },
    });
    assert.ok(body.length > 200_000 && body.length < 1024 * 1024, 'within the body limit');
    const response = await svc.api('POST', '/v2/svc/functions', { bearer: await svc.token(), body });
    assertProblem(response, 400, '/v2/svc/functions');
    assert.ok(response.text.length < 8192, `${response.text.length} bytes`);
    assert.equal(response.body.errors.length, 20);
    assert.deepEqual(response.body.errors[0], { field: 'rateLimit.exemptedNcaIds.0', message: 'Invalid input: expected string, received number' });
    assert.match(response.body.detail, /^Validation failed \(100000 errors, the first 20 listed\): rateLimit\.exemptedNcaIds\.0: /);
  });

  test('/v3/openapi lists every route of its host with its scopes', async () => {
    const api = (await svc.api('GET', '/v3/openapi')).body;
    assert.equal(api.openapi, '3.1.0');
    for (const path of ['/admin/health/liveness', '/admin/health/readiness', '/health', '/v2/svc/accounts', '/v2/svc/accounts/{ncaId}', '/v2/svc/whoami', '/v3/openapi']) {
      assert.ok(api.paths[path], path);
    }
    assert.equal(api.paths['/v1/keys'], undefined, 'key service routes are in its own document');
    assert.deepEqual(api.paths['/v2/svc/accounts/{ncaId}'].patch['x-svc-scopes'], ['account_setup']);
    assert.ok(api.components.schemas.Account);
    const keys = (await svc.keys('GET', '/v3/openapi')).body;
    const post = keys.paths['/v1/keys'].post;
    assert.deepEqual(post.parameters.map((p: { name: string; in: string; required: boolean }) => `${p.in}:${p.name}:${p.required}`),
      ['header:key-issuer-service:true', 'header:key-issuer-id:true', 'header:key-owner-id:true']);
    assert.deepEqual(post.requestBody.content['application/json'].schema.required, ['expires_at', 'authorizations']);
  });

  test('logs carry the request id and never a credential or secret', async () => {
    const token = await svc.token();
    const key = await svc.apiKey(token, ['account_setup']);
    const response = await svc.api('GET', '/v2/svc/accounts/svc-default', { bearer: key, headers: { cookie: 'session=s3cr3t-cookie' } });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const line = svc.logs.find((entry) => entry.includes(String(response.headers['x-request-id'])));
    assert.ok(line, 'the request was logged with its id');
    const all = svc.logs.join('\n');
    for (const secret of [key, token, svc.bootstrapSecret, 's3cr3t-cookie']) assert.ok(!all.includes(secret), 'no secret in logs');
    for (const entry of svc.logs) JSON.parse(entry);
  });

  test('a credential in a URL is redacted in the log line, the rest of the URL kept', async () => {
    const token = await svc.token();
    const key = await svc.apiKey(token, ['account_setup']);
    const response = await svc.api('GET', `/v2/svc/accounts/svc-default?api_key=${key}&token=${encodeURIComponent(token)}&limit=5&x=${key}`, { bearer: key });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const line = JSON.parse(svc.logs.find((entry) => entry.includes(String(response.headers['x-request-id'])))!);
    assert.equal(line.url, '/v2/svc/accounts/svc-default?api_key=[redacted]&token=[redacted]&limit=5&x=[redacted]');
    const pathKey = await svc.api('GET', `/v2/svc/accounts/${key}`, { bearer: key });
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(JSON.parse(svc.logs.find((entry) => entry.includes(String(pathKey.headers['x-request-id'])))!).url, '/v2/svc/accounts/[redacted]');
    // pexec is served before Express (http/lean.ts): its access log line is redacted the same way.
    const pexec = await svc.api('POST', `/v2/svc/pexec/functions/00000000-0000-4000-8000-000000000000?api_key=${key}`, { bearer: key, body: {} });
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(JSON.parse(svc.logs.find((entry) => entry.includes(String(pexec.headers['x-request-id'])))!).url,
      '/v2/svc/pexec/functions/00000000-0000-4000-8000-000000000000?api_key=[redacted]');
    assert.ok(!svc.logs.join('\n').includes(key));
  });
});

describe('gateway over TLS', () => {
  let svc: TestPlatform;
  let ca: string;
  before(async () => {
    const dir = tempDir();
    const pems = await selfsigned.generate([{ name: 'commonName', value: 'localhost' }], {
      algorithm: 'sha256', extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }, { type: 2, value: 'api.localhost' }, { type: 2, value: 'api-keys.localhost' }, { type: 7, ip: '127.0.0.1' }] }],
    });
    writeFileSync(path.join(dir, 'cert.pem'), pems.cert);
    writeFileSync(path.join(dir, 'key.pem'), pems.private);
    ca = pems.cert;
    svc = await startTestPlatform({ ca, config: { gateway: { tlsCert: path.join(dir, 'cert.pem'), tlsKey: path.join(dir, 'key.pem') } } });
  });
  after(() => svc.close());

  test('serves https with the configured certificate, verified against it', async () => {
    assert.match(svc.url, /^https:/);
    const response = await request(svc.url, 'GET', '/admin/health/liveness', { host: 'api.localhost', ca });
    assert.equal(response.status, 200);
    await assert.rejects(request(svc.url, 'GET', '/admin/health/liveness', { host: 'api.localhost' }), /self-signed|unable to verify/);
  });
});

describe('health endpoints', async () => {
  test('liveness is always 200; readiness and /health report db_client', async () => {
    const svc = await startTestPlatform();
    try {
      assert.deepEqual((await svc.api('GET', '/admin/health/liveness')).body, { status: 'UP' });
      assert.deepEqual((await svc.api('GET', '/admin/health/readiness')).body, { status: 'UP' });
      const report = await svc.api('GET', '/health');
      assert.equal(report.status, 200);
      assert.equal(report.body.status, 'healthy');
      assert.equal(report.body.components.db_client.status, 'healthy');
    } finally {
      await svc.close();
    }
  });

  if ((await backends()).includes('postgres')) {
    test('readiness is 503 while the database is unreachable, liveness stays 200, and both recover', async () => {
      const svc = await startTestPlatform({ backend: 'postgres' });
      const name = new URL(svc.database.databaseUrl!).pathname.slice(1);
      const admin = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
      await admin.connect();
      try {
        // Block new connections and cut the platform's existing ones.
        await admin.query(`alter database ${name} allow_connections false`);
        await admin.query('select pg_terminate_backend(pid) from pg_stat_activity where datname = $1', [name]);
        const down = await svc.api('GET', '/admin/health/readiness');
        assert.equal(down.status, 503);
        const report = await svc.api('GET', '/health');
        assert.equal(report.status, 503);
        assert.equal(report.body.components.db_client.status, 'unhealthy');
        assert.ok(!report.body.components.db_client.error.includes('postgres://'), 'no connection string');
        assert.equal((await svc.api('GET', '/admin/health/liveness')).status, 200);
        // An agent that links meanwhile is told to come back, not left hanging with its socket open.
        const link = await upgradeRefusal(svc.url, AGENT_LINK_PATH, 'svcagent-not-checkable');
        assert.equal(link.status, 503);
        assert.equal(link.headers['retry-after'], '5');
        await admin.query(`alter database ${name} allow_connections true`);
        assert.equal((await svc.api('GET', '/admin/health/readiness')).status, 200);
      } finally {
        await admin.query(`alter database ${name} allow_connections true`);
        await admin.end();
        await svc.close();
      }
    });
  }
});
