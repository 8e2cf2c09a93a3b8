// Start-up: required variables fail fast with one line naming the variable; defaults match spec §4.7.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';

const MAIN = path.resolve(import.meta.dirname, '../src/main.ts');
const BASE = { SVC_API_KEY: 'svcapikey-test', STREAMING_FUNCTION_ID: 'fn-1', PROXY_AUTH_DISABLED: 'true' };

/** Runs the real entry point with exactly `env` (plus PATH) and returns its exit code and stderr. */
function start(env: Record<string, string>): { status: number | null; stderr: string; stdout: string } {
  const result = spawnSync(process.execPath, [MAIN], { env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8', timeout: 10_000 });
  return { status: result.status, stderr: result.stderr, stdout: result.stdout };
}

describe('start-up failures', () => {
  const cases: [string, Record<string, string>, string][] = [
    ['SVC_API_KEY', { STREAMING_FUNCTION_ID: 'fn-1', PROXY_AUTH_DISABLED: 'true' }, 'proxy: SVC_API_KEY is required'],
    ['STREAMING_FUNCTION_ID', { SVC_API_KEY: 'k', PROXY_AUTH_DISABLED: 'true' }, 'proxy: STREAMING_FUNCTION_ID is required'],
    ['PROXY_AUTH_JWKS_URL', { SVC_API_KEY: 'k', STREAMING_FUNCTION_ID: 'fn-1' }, 'proxy: PROXY_AUTH_JWKS_URL is required (or PROXY_AUTH_DISABLED=true for development)'],
    ['PROXY_AUTH_ISSUER', { SVC_API_KEY: 'k', STREAMING_FUNCTION_ID: 'fn-1', PROXY_AUTH_JWKS_URL: 'https://id.example/jwks' }, 'proxy: PROXY_AUTH_ISSUER is required (or PROXY_AUTH_DISABLED=true for development)'],
    ['PROXY_AUTH_AUDIENCE', { SVC_API_KEY: 'k', STREAMING_FUNCTION_ID: 'fn-1', PROXY_AUTH_JWKS_URL: 'https://id.example/jwks', PROXY_AUTH_ISSUER: 'i' }, 'proxy: PROXY_AUTH_AUDIENCE is required (or PROXY_AUTH_DISABLED=true for development)'],
    ['PROXY_PORT', { ...BASE, PROXY_PORT: 'eighty' }, 'proxy: PROXY_PORT must be an integer ≥ 0'],
    ['PROXY_SSL_INSECURE', { ...BASE, PROXY_SSL_INSECURE: 'yes' }, 'proxy: PROXY_SSL_INSECURE must be true or false'],
    ['SVC_CA_FILE', { ...BASE, SVC_CA_FILE: '/nonexistent/ca.pem' }, 'proxy: SVC_CA_FILE cannot be read: ENOENT'],
    ['SVC_SERVER', { ...BASE, SVC_SERVER: 'ftp://gateway.example' }, 'proxy: SVC_SERVER must use https or http'],
  ];
  for (const [variable, env, line] of cases) {
    test(`${variable}: exit 1 with one line naming it`, () => {
      const result = start(env);
      assert.equal(result.status, 1);
      assert.equal(result.stderr, `${line}\n`);
      assert.equal(result.stdout, '');
    });
  }
  test('an empty value counts as missing', () => {
    assert.equal(start({ ...BASE, SVC_API_KEY: '  ' }).stderr, 'proxy: SVC_API_KEY is required\n');
  });
});

describe('development modes are announced at every start', () => {
  test('PROXY_AUTH_DISABLED, SVC_TLS_SKIP_VERIFY and PROXY_SSL_INSECURE each log a warning', async () => {
    const child = spawn(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH ?? '', ...BASE, SVC_TLS_SKIP_VERIFY: 'true', PROXY_SSL_INSECURE: 'true', PROXY_PORT: '0', PROXY_HOST: '127.0.0.1' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    // Listening before anything can end the child, so an early exit is seen, never waited for forever.
    const exited = once(child, 'exit');
    const guard = setTimeout(() => child.kill('SIGKILL'), 10_000);
    let stdout = '';
    child.stdout.setEncoding('utf8');
    for await (const chunk of child.stdout) {
      stdout += chunk;
      if (stdout.includes('proxy listening')) break;
    }
    child.kill('SIGTERM');
    await exited;
    clearTimeout(guard);
    assert.match(stdout, /proxy listening/, stdout);
    const warnings = stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line) as { level: number; msg: string }).filter((line) => line.level === 40);
    assert.ok(warnings.some((line) => line.msg.startsWith('PROXY_AUTH_DISABLED=true: user authentication is OFF')));
    assert.ok(warnings.some((line) => line.msg.startsWith('SVC_TLS_SKIP_VERIFY=true')));
    assert.ok(warnings.some((line) => line.msg.startsWith('PROXY_SSL_INSECURE=true')));
    assert.ok(!stdout.includes('svcapikey-test'), 'the API key is never logged');
  });
});

describe('defaults', () => {
  test('spec §4.7 defaults: port 49100, plain HTTP, gateway address on TLS 443, reference timeouts', () => {
    const config = loadConfig({ SVC_API_KEY: 'k', STREAMING_FUNCTION_ID: 'fn-1', PROXY_AUTH_JWKS_URL: 'https://id.example/jwks', PROXY_AUTH_ISSUER: 'https://id.example', PROXY_AUTH_AUDIENCE: 'proxy' });
    assert.equal(config.listen.port, 49100);
    assert.equal(config.listen.tls, 'off');
    assert.equal(config.upstream.url.href, 'https://localhost/');
    assert.equal(config.upstream.host, 'api.localhost');
    assert.equal(config.upstream.verifyTls, true);
    assert.deepEqual(config.timeouts, { clientMs: 7_000, serverMs: 7_000, connectMs: 4_000, httpRequestMs: 1_800_000, pingIntervalMs: 2_000 });
    assert.equal(config.functionVersionId, undefined);
    assert.equal(config.auth.mode, 'jwt');
    assert.equal(config.cookies.path, '/');
  });

  test('SVC_SERVER: a bare host means TLS on 443 and is the Host; SVC_SERVER_HOST overrides the Host', () => {
    const bare = loadConfig({ ...BASE, SVC_SERVER: 'gateway.svc.example' });
    assert.equal(bare.upstream.url.href, 'https://gateway.svc.example/');
    assert.equal(bare.upstream.host, 'gateway.svc.example');
    assert.equal(bare.upstream.servername, 'gateway.svc.example');
    const local = loadConfig({ ...BASE, SVC_SERVER: 'https://127.0.0.1:8443', SVC_SERVER_HOST: 'api.localhost' });
    assert.equal(local.upstream.url.port, '8443');
    assert.equal(local.upstream.host, 'api.localhost');
    assert.equal(local.upstream.servername, 'api.localhost');
    const address = loadConfig({ ...BASE, SVC_GATEWAY_ADDRESS: 'svc.example' });
    assert.equal(address.upstream.url.href, 'https://svc.example/');
    assert.equal(address.upstream.host, 'api.svc.example');
  });

  test('the ping interval must be shorter than both idle timeouts', () => {
    assert.throws(() => loadConfig({ ...BASE, PROXY_TIMEOUT_CLIENT_MS: '1000', PROXY_PING_INTERVAL_MS: '1000' }), /PROXY_PING_INTERVAL_MS must be shorter/);
  });
});
