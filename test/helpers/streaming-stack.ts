// The whole streaming path as a user meets it, for end-to-end tests, benchmarks and the docs' screenshots:
// the platform on port 0 with a STREAMING function of the reference container, the intermediary proxy as
// its own process (HTTPS with a self-signed certificate, user tokens checked against a JWKS), and headless
// Chromium. Nothing is mocked.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import type { ConfigInput } from '../../api/src/config.ts';
import { streamingBody } from '../../api/test/helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from '../../api/test/helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from '../../api/test/helpers/platform.ts';
import { freePort, until } from '../../api/test/helpers/wait.ts';

export { boundMs } from '../../api/test/helpers/wait.ts';

const REPO = path.resolve(import.meta.dirname, '../..');
export const CHROMIUM = '/usr/bin/chromium';
export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** What the client page's `svcStream.snapshot()` returns, as far as tests read it. */
export interface Snapshot {
  framesDecodedFromBarcode: number;
  setupMs?: number;
  metrics: { localCandidateType?: string; appEncoder?: string };
  status: string;
  state: string;
  inputReady: boolean;
}

/**
 * page.goto, again if Chromium saw the host's network change meanwhile (containers coming and going on it):
 * the change can fail the navigation itself or only the client's module, and then the page has no svcStream.
 */
export async function goto(page: Page, url: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await page.goto(url).catch(async (error: unknown) => {
        // Chromium restarted the same navigation itself: wait for that load rather than start another.
        if (!String(error).includes('interrupted by another navigation')) throw error;
        await page.waitForLoadState('load');
      });
      await page.waitForFunction('typeof svcStream === "object"', undefined, { timeout: 10_000 });
      return;
    } catch (error) {
      if (attempt >= 5) throw error;
      await sleep(1000); // a change comes with others (a link and its addresses): let them settle
    }
  }
}

export async function waitForSnapshot(page: Page, what: string, done: (s: Snapshot) => boolean, timeoutMs = 30_000): Promise<Snapshot> {
  let last: Snapshot | undefined;
  let failure = 'no answer';
  try {
    return await until(what, async () => {
      const snapshot = await (page.evaluate('svcStream.snapshot()') as Promise<Snapshot>).catch((error: Error) => { failure = error.message; });
      last = snapshot ?? last;
      return snapshot && done(snapshot) ? snapshot : undefined;
    }, timeoutMs);
  } catch {
    throw new Error(`timed out waiting for ${what}; last: ${last ? JSON.stringify(last) : failure}`);
  }
}

/** A user's identity provider: a JWKS over HTTP and tokens granting functions (the proxy's svc_functions claim). */
export async function identityProvider() {
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

export interface StreamingStackOptions {
  config?: ConfigInput;
  /** The function's name (the start screen shows it). */
  name: string;
  /** Deployment specification overrides (default: one instance). */
  spec?: Record<string, unknown>;
  video?: string;
  /** More of the container's environment (e.g. the application an x11 container streams). */
  environment?: { key: string; value: string }[];
  /** The function's container image (default: the catalog's process-runtime copy of the reference app). */
  image?: string;
}

export interface StreamingStack {
  svc: TestPlatform;
  key: string;
  fn: Deployed;
  idp: Awaited<ReturnType<typeof identityProvider>>;
  /** A user token granting the function, as the browser's cookie holds it. */
  userToken: string;
  proxyPort: number;
  /** A browser whose user is signed in for the function (svc-user-token cookie on the proxy's site). */
  context: BrowserContext;
  /** The client page served by the proxy. */
  pageUrl(query?: string): string;
  close(): Promise<void>;
}

export async function startStreamingStack(options: StreamingStackOptions): Promise<StreamingStack> {
  const closers: (() => unknown)[] = [];
  const close = async () => {
    for (const closer of closers.splice(0).reverse()) await closer();
  };
  try {
    const svc = await startTestPlatform({ config: options.config });
    closers.push(() => svc.close());
    const token = await svc.token();
    const key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    const fn = await deploy(svc, token, streamingBody({
      name: options.name, description: 'The reference streaming container: a test scene that follows your pointer',
      containerImage: options.image ?? 'local/streaming-app:1',
      containerEnvironment: [
        { key: 'STREAMING_VIDEO_SIZE', value: options.video ?? '640x360' }, { key: 'STREAMING_VIDEO_FPS', value: '30' }, ...(options.environment ?? []),
      ],
    }), options.spec);
    await waitFor(svc, key, fn, running, 60_000);

    const idp = await identityProvider();
    closers.push(() => idp.close());
    const proxyPort = await freePort();
    const gateway = new URL(svc.url);
    const proxy: ChildProcess = spawn(process.execPath, [path.join(REPO, 'proxy/src/main.ts')], {
      env: {
        ...process.env, SVC_API_KEY: key, STREAMING_FUNCTION_ID: fn.id, SVC_SERVER: `http://127.0.0.1:${gateway.port}`,
        SVC_SERVER_HOST: `api.localhost:${gateway.port}`, PROXY_PORT: String(proxyPort), PROXY_HOST: '127.0.0.1', PROXY_SSL_INSECURE: 'true',
        PROXY_AUTH_JWKS_URL: idp.jwksUrl, PROXY_AUTH_ISSUER: 'https://idp.test', PROXY_AUTH_AUDIENCE: 'svc-demo', PROXY_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    closers.push(() => proxy.kill('SIGTERM'));
    await until('the proxy listening', () => new Promise<boolean>((resolve) => {
      const probe = net.connect(proxyPort, '127.0.0.1', () => resolve(Boolean(probe.end()))).on('error', () => resolve(false));
    }));

    const profile = mkdtempSync(path.join(os.tmpdir(), 'svc-stack-chromium-'));
    closers.push(() => rmSync(profile, { recursive: true, force: true }));
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true, ignoreHTTPSErrors: true, viewport: { width: 1280, height: 720 },
    });
    closers.push(() => context.close());
    const userToken = await idp.sign([fn.id]);
    await context.addCookies([{ name: 'svc-user-token', value: userToken, domain: 'localhost', path: '/', secure: true, sameSite: 'None' }]);
    return { svc, key, fn, idp, userToken, proxyPort, context, pageUrl: (query = '') => `https://localhost:${proxyPort}/client/${query}`, close };
  } catch (error) {
    await close();
    throw error;
  }
}

/** Until the stack's function has an instance free for a session (the sign-in's `free`, absorbed: nothing is reserved). */
export async function waitForFreeInstance(stack: StreamingStack): Promise<void> {
  await until('a free instance', async () => {
    const response = await fetch(`${stack.svc.url}/sign_in`, {
      headers: { 'x-svc-absorb': 'true', authorization: `Bearer ${stack.key}`, 'svc-function-id': stack.fn.id },
    }).catch(() => undefined);
    return response?.ok && ((await response.json()) as { free: number }).free > 0;
  }, 120_000);
}
