// The no-build client serving: TypeScript modules go out as JavaScript, nothing outside client/ leaks.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { createClientFiles } from '../src/client-files.ts';

const files = createClientFiles('/client/');
const server = createServer((req, res) => {
  const path = (req.url ?? '/').split('?')[0];
  if (files.handles(path)) files.serve(req, res, path);
  else { res.writeHead(404); res.end(); }
});
let base = '';
before(() => new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => { base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`; resolve(); })));
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

test('index.html is served at the directory URL; /client redirects keeping the query', async () => {
  const page = await fetch(`${base}/client/`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type') ?? '', /text\/html/);
  assert.match(await page.text(), /<script type="module" src=".\/main.ts">/);
  const redirect = await fetch(`${base}/client?signal=ws://x/sign_in`, { redirect: 'manual' });
  assert.equal(redirect.status, 301);
  assert.equal(redirect.headers.get('location'), '/client/?signal=ws://x/sign_in');
});

test('.ts modules are served as JavaScript with the types stripped', async () => {
  const response = await fetch(`${base}/client/stream-client.ts`);
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /text\/javascript/);
  const body = await response.text();
  assert.match(body, /export class StreamClient/);
  assert.doesNotMatch(body, /import type|: StreamClientOptions/);
  // Valid JavaScript: it parses as a module.
  assert.doesNotThrow(() => new Function(body.replace(/^import .*$/gm, '').replace(/^export /gm, '')));
  const etag = response.headers.get('etag') ?? '';
  assert.equal((await fetch(`${base}/client/stream-client.ts`, { headers: { 'if-none-match': etag } })).status, 304);
});

test('paths outside the client directory and non-client files are not served', async () => {
  for (const path of ['/client/../src/config.ts', '/client/%2e%2e/src/config.ts', '/client/tsconfig.json', '/client/.hidden.ts', '/client/nothing.ts']) {
    assert.equal((await fetch(`${base}${path}`)).status, 404, path);
  }
});
