// The whole streaming path in headless Chromium: page over HTTPS (self-signed, accepted) → intermediary
// proxy (user token checked against a JWKS) → gateway → session broker → the reference streaming
// container, with coturn relaying for relay-only ICE. Nothing is mocked: every piece is the real process.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { WebSocket } from 'ws';
import { streamingBody } from '../api/test/helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from '../api/test/helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from '../api/test/helpers/platform.ts';
import { freeTcpPort, freeUdpRange } from '../streaming-app/test/helpers.ts';

const REPO = path.resolve(import.meta.dirname, '..');
const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const tools = [['ffmpeg', '/usr/bin/ffmpeg'], ['chromium', CHROMIUM], ['coturn', '/usr/bin/turnserver']].filter(([, file]) => !existsSync(file));
const skip = tools.length && !process.env.CI ? `needs ${tools.map(([name]) => name).join(', ')} (Debian packages ffmpeg chromium coturn)` : false;
if (skip) console.log(`# skipping the streaming end-to-end test: ${skip}`);

interface Snapshot {
  framesDecodedFromBarcode: number;
  metrics: { localCandidateType?: string };
  status: string;
  state: string;
}

async function waitForSnapshot(page: Page, what: string, until: (s: Snapshot) => boolean, timeoutMs = 30_000): Promise<Snapshot> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const snapshot = await (page.evaluate('svcStream.snapshot()') as Promise<Snapshot>).catch(() => undefined);
    if (snapshot && until(snapshot)) return snapshot;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(snapshot)}`);
    await sleep(100);
  }
}

/** A user's identity provider: a JWKS over HTTP and tokens granting functions (the proxy's svc_functions claim). */
async function identityProvider() {
  const { privateKey, publicKey } = await generateKeyPair('ES256');
  const stranger = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'user-key', alg: 'ES256', use: 'sig' };
  const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [jwk] })));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const sign = (functions: string[], key: CryptoKey = privateKey) => new SignJWT({ svc_functions: functions })
    .setProtectedHeader({ alg: 'ES256', kid: 'user-key' }).setIssuer('https://idp.test').setAudience('svc-demo')
    .setSubject('user-1').setExpirationTime('10m').sign(key);
  return {
    jwksUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`,
    sign,
    signWithStrangerKey: (functions: string[]) => sign(functions, stranger.privateKey),
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

describe('streaming end to end: Chromium → proxy → gateway → container', { skip }, () => {
  let svc: TestPlatform;
  let fn: Deployed;
  let key: string;
  let proxy: ChildProcess;
  let proxyPort: number;
  let idp: Awaited<ReturnType<typeof identityProvider>>;
  let context: BrowserContext;
  const profile = mkdtempSync(path.join(os.tmpdir(), 'svc-e2e-chromium-'));

  before(async () => {
    const relay = await freeUdpRange(30);
    svc = await startTestPlatform({
      config: {
        turn: { server: 'coturn', port: await freeTcpPort(), relayPortRange: `${relay.min}-${relay.max}` },
        streaming: { resumeWindowSeconds: 60 },
      },
    });
    const token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    fn = await deploy(svc, token, streamingBody({
      name: 'e2e-stream', containerImage: 'local/streaming-app:1',
      containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '640x360' }, { key: 'STREAMING_VIDEO_FPS', value: '30' }],
    }));
    await waitFor(svc, key, fn, running, 60_000);

    idp = await identityProvider();
    proxyPort = await freeTcpPort();
    const gateway = new URL(svc.url);
    proxy = spawn(process.execPath, [path.join(REPO, 'proxy/src/main.ts')], {
      env: {
        ...process.env, SVC_API_KEY: key, STREAMING_FUNCTION_ID: fn.id, SVC_SERVER: `http://127.0.0.1:${gateway.port}`,
        SVC_SERVER_HOST: `api.localhost:${gateway.port}`, PROXY_PORT: String(proxyPort), PROXY_HOST: '127.0.0.1', PROXY_SSL_INSECURE: 'true',
        PROXY_AUTH_JWKS_URL: idp.jwksUrl, PROXY_AUTH_ISSUER: 'https://idp.test', PROXY_AUTH_AUDIENCE: 'svc-demo', PROXY_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    for (let attempt = 0; attempt < 100; attempt++) {
      const up = await new Promise<boolean>((resolve) => {
        const probe = http.get({ port: proxyPort, host: '127.0.0.1', path: '/' }, () => resolve(true)).on('error', () => resolve(false));
        probe.end();
      });
      if (up) break;
      await sleep(100);
    }
    context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true, ignoreHTTPSErrors: true });
    await context.addCookies([{ name: 'svc-user-token', value: await idp.sign([fn.id]), domain: 'localhost', path: '/', secure: true, sameSite: 'None' }]);
  });

  after(async () => {
    await context?.close();
    proxy?.kill('SIGTERM');
    await idp?.close();
    await svc?.close();
    rmSync(profile, { recursive: true, force: true });
  });

  test('the proxy refuses a bad user token with 401 and a token for another function with 403, with CORS', async () => {
    const refusal = (token: string) => new Promise<{ status: number; headers: http.IncomingHttpHeaders }>((resolve, reject) => {
      const ws = new WebSocket(`wss://localhost:${proxyPort}/sign_in`, [`token.${token}`], { rejectUnauthorized: false });
      ws.once('unexpected-response', (_req, response) => resolve({ status: response.statusCode ?? 0, headers: response.headers }));
      ws.once('open', () => reject(new Error('opened')));
      ws.once('error', () => {});
    });
    const forged = await refusal(await idp.signWithStrangerKey([fn.id]));
    assert.equal(forged.status, 401);
    const other = await refusal(await idp.sign(['00000000-0000-4000-8000-000000000000']));
    assert.equal(other.status, 403);
    for (const response of [forged, other]) {
      assert.equal(response.headers['access-control-allow-origin'], '*');
      assert.equal(response.headers['access-control-expose-headers'], '*');
      assert.match(String(response.headers['content-type']), /^application\/problem\+json/);
    }
  });

  test('frames decode over HTTPS through the proxy; a dropped WebSocket resumes on the same instance; bye brings a fresh instance', async () => {
    const page = await context.newPage();
    await page.goto(`https://localhost:${proxyPort}/client/?autostart=1`);
    await waitForSnapshot(page, '30 decoded frames', (s) => s.framesDecodedFromBarcode >= 30);
    const session = await page.evaluate('svcStream.client.config.sessionId') as string;
    const instanceBefore = (await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: key })).body.function.activeInstances[0].instanceId;
    const cookies = await context.cookies(`https://localhost:${proxyPort}`);
    const sessionCookie = cookies.find((cookie) => cookie.name === 'svc-request-id');
    assert.ok(sessionCookie, 'the platform session cookie, aligned to the proxy');
    assert.equal(sessionCookie.secure, true);

    await page.evaluate('svcStream.dropSocket()');
    const frames = (await page.evaluate('svcStream.snapshot()') as Snapshot).framesDecodedFromBarcode;
    await waitForSnapshot(page, 'frames after the resume', (s) => s.status === 'resumed' && s.framesDecodedFromBarcode >= frames + 20);
    assert.equal(await page.evaluate('svcStream.client.config.sessionId'), session, 'the same session on the same container');

    await page.evaluate('svcStream.bye("test done")');
    const fresh = await waitFor(svc, key, fn, (record) => running(record) && record.activeInstances.every((instance: any) => instance.instanceId !== instanceBefore), 60_000);
    assert.equal(fresh.activeInstances[0].instanceStatus, 'RUNNING');
    await page.close();
  });

  test('relay-only ICE through the platform TURN server', async () => {
    const page = await context.newPage();
    // The previous session's cookie is still in the browser: the client's sign-in replaces it.
    await page.goto(`https://localhost:${proxyPort}/client/?autostart=1&relay=1`);
    const snapshot = await waitForSnapshot(page, 'frames over the relay', (s) => s.framesDecodedFromBarcode >= 30 && s.metrics.localCandidateType !== undefined, 45_000);
    assert.equal(snapshot.metrics.localCandidateType, 'relay');
    await page.evaluate('svcStream.bye("test done")');
    await page.close();
  });

  test('A streams, B waits in line with its place shown, A closes the tab, B streams without ever seeing an error', async () => {
    await waitFor(svc, key, fn, running, 60_000);
    const a = await context.newPage();
    await a.goto(`https://localhost:${proxyPort}/client/`);
    assert.equal(await a.textContent('#app-name'), 'e2e-stream', 'the start screen names the app');
    await a.click('#action');
    await waitForSnapshot(a, 'A streaming', (s) => s.framesDecodedFromBarcode >= 10);

    const b = await context.newPage();
    await b.goto(`https://localhost:${proxyPort}/client/`);
    await b.evaluate(`window.seen = []; new MutationObserver(() => seen.push(document.body.dataset.state + ': ' + document.getElementById('message').textContent))
      .observe(document.body, { attributes: true, subtree: true, childList: true, characterData: true })`);
    await b.click('#action');
    await b.waitForSelector('#place:visible');
    assert.equal(await b.textContent('#place'), '#1');
    assert.match(String(await b.textContent('#message')), /You are #1 in line/);

    await a.close({ runBeforeUnload: true });
    // Bounded wait: the next person streams within 5 s of the tab closing (the time itself is in bench/stream).
    await waitForSnapshot(b, 'B streaming after A left', (s) => s.state === 'streaming' && s.framesDecodedFromBarcode >= 10, 5000);
    const seen = await b.evaluate('seen') as string[];
    assert.ok(seen.every((entry) => /^(start|connecting|waiting|streaming):/.test(entry)), `B only ever saw its place and the stream: ${seen.join(' | ')}`);
    await b.click('#stop');
    assert.equal(await b.evaluate('svcStream.state'), 'ended');
    assert.equal(await b.textContent('#message'), 'You ended the session.');
    await b.close();
  });

  test('a WebSocket that connects and says nothing gives its instance to the next person within 5 s', async () => {
    await waitFor(svc, key, fn, running, 60_000);
    const silent = new WebSocket(`wss://localhost:${proxyPort}/sign_in`, [`token.${await idp.sign([fn.id])}`, `function-id.${fn.id}`], { rejectUnauthorized: false });
    await new Promise((resolve, reject) => { silent.once('open', resolve); silent.once('error', reject); });
    const closedBy = new Promise<number>((resolve) => silent.once('close', resolve));
    const page = await context.newPage();
    await page.goto(`https://localhost:${proxyPort}/client/?autostart=1`);
    await page.waitForSelector('#place:visible');
    await waitForSnapshot(page, 'granted after the silent socket', (s) => s.state !== 'waiting' && s.state !== 'start', 5000);
    assert.equal(await closedBy, 4400, 'the container closed the silent connection');
    await waitForSnapshot(page, 'frames', (s) => s.framesDecodedFromBarcode >= 10);
    await page.close({ runBeforeUnload: true });
  });
});
