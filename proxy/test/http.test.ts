// The proxy's own HTTP answers: preflights, the browser client files, errors — all with CORS.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { startIdentityProvider, type IdentityProvider } from './helpers/identity.ts';
import { startFakePlatform, type FakePlatform } from './helpers/platform-upstream.ts';
import { startProxy, type RunningProxy } from './helpers/proxy.ts';

function assertCors(response: Response): void {
  assert.equal(response.headers.get('access-control-allow-origin'), '*');
  assert.equal(response.headers.get('access-control-allow-headers'), '*');
  assert.equal(response.headers.get('access-control-expose-headers'), '*');
}

/** A request path sent exactly as written (fetch would normalise `..`). */
async function rawGet(port: number, target: string): Promise<string> {
  const socket = net.connect(port, '127.0.0.1');
  await once(socket, 'connect');
  // write, not end: Node drops the response to a request whose sender half-closed.
  socket.write(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
  let text = '';
  for await (const chunk of socket) text += String(chunk);
  return text;
}

describe('HTTP served by the proxy', () => {
  let platform: FakePlatform;
  let identity: IdentityProvider;
  let running: RunningProxy;
  let clientDir: string;

  before(async () => {
    const base = mkdtempSync(path.join(os.tmpdir(), 'proxy-client-'));
    clientDir = path.join(base, 'client');
    mkdirSync(clientDir);
    writeFileSync(path.join(clientDir, 'index.html'), '<!doctype html><script type="module" src="./main.ts"></script>');
    writeFileSync(path.join(clientDir, 'main.ts'), [
      "import type { Thing } from './types.ts';",
      'interface Options { url: string; retries?: number }',
      'export function connect(options: Options, count: number = 1): string {',
      '  const value = options.url as string;',
      '  return value + count;',
      '}',
      '',
    ].join('\n'));
    writeFileSync(path.join(clientDir, '.secret.ts'), 'export const secret = 1;');
    writeFileSync(path.join(clientDir, 'tsconfig.json'), '{}');
    writeFileSync(path.join(base, 'outside.html'), 'outside');
    symlinkSync(path.join(base, 'outside.html'), path.join(clientDir, 'link.html'));
    [platform, identity] = await Promise.all([startFakePlatform(), startIdentityProvider()]);
    running = await startProxy(platform, identity, { PROXY_CLIENT_DIR: clientDir });
  });
  after(async () => {
    await running.close();
    await Promise.all([platform.close(), identity.close()]);
  });

  test('a preflight is answered by the proxy with CORS, without a token', async () => {
    const response = await fetch(`${running.url}/sign_in`, {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'x-custom' },
    });
    assert.equal(response.status, 204);
    assertCors(response);
    assert.match(response.headers.get('access-control-allow-methods') ?? '', /POST/);
    assert.equal(platform.requests.length, 0);
  });

  test('the client is served without a token; .ts goes out as JavaScript with the types stripped', async () => {
    const index = await fetch(`${running.url}/client/`);
    assert.equal(index.status, 200);
    assert.equal(index.headers.get('content-type'), 'text/html; charset=utf-8');
    assertCors(index);
    assert.match(await index.text(), /main\.ts/);

    const script = await fetch(`${running.url}/client/main.ts`);
    assert.equal(script.status, 200);
    assert.equal(script.headers.get('content-type'), 'text/javascript; charset=utf-8');
    const code = await script.text();
    assert.doesNotMatch(code, /interface|import type|: Options|: string|as string|: number/);
    assert.match(code, /export function connect\(options\s*, count\s*= 1\)/);
    // What is served is valid JavaScript a browser can run.
    const module = await import(`data:text/javascript,${encodeURIComponent(code)}`) as { connect(options: { url: string }, count?: number): string };
    assert.equal(module.connect({ url: 'ws://x/' }, 2), 'ws://x/2');

    const again = await fetch(`${running.url}/client/main.ts`, { headers: { 'if-none-match': script.headers.get('etag') ?? '' } });
    assert.equal(again.status, 304);
  });

  test('/ and /client redirect into the client directory', async () => {
    const root = await fetch(`${running.url}/`, { redirect: 'manual' });
    assert.equal(root.status, 302);
    assert.equal(root.headers.get('location'), '/client/');
    const bare = await fetch(`${running.url}/client?signal=/sign_in`, { redirect: 'manual' });
    assert.equal(bare.status, 301);
    assert.equal(bare.headers.get('location'), '/client/?signal=/sign_in');
  });

  test('no way out of the client directory, no dotfiles, no unknown types: 404 problem+json with CORS', async () => {
    for (const target of ['/client/../outside.html', '/client/%2e%2e/outside.html', '/client/..%2foutside.html', '/client/link.html', '/client/.secret.ts', '/client/missing.js', '/client/index.exe', '/client/tsconfig.json']) {
      const text = await rawGet(running.port, target);
      assert.match(text, /^HTTP\/1\.1 404/, target);
      assert.match(text, /access-control-allow-origin: \*/i, target);
      assert.match(text, /application\/problem\+json/, target);
      assert.doesNotMatch(text, /outside$|secret = 1/, target);
    }
    const response = await fetch(`${running.url}/client/missing.js`);
    assert.equal(response.status, 404);
    assertCors(response);
    const problem = await response.json() as Record<string, unknown>;
    assert.equal(problem.type, 'urn:svc:problem-details:not-found');
    assert.equal(problem.instance, '/client/missing.js');
  });

  test('a method other than GET on the client files: 405 with CORS', async () => {
    const response = await fetch(`${running.url}/client/index.html`, { method: 'DELETE' });
    assert.equal(response.status, 405);
    assertCors(response);
  });

  test('a malformed request gets a 400 problem with CORS', async () => {
    const socket = net.connect(running.port, '127.0.0.1');
    await once(socket, 'connect');
    socket.end('NOT HTTP AT ALL\r\n\r\n');
    let text = '';
    for await (const chunk of socket) text += String(chunk);
    assert.match(text, /^HTTP\/1\.1 400/);
    assert.match(text, /access-control-allow-origin: \*/i);
  });
});
