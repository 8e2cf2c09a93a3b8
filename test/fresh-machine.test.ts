// `npm start` on a machine with only Node.js 24 and what npm installed: the platform runs as `svc serve
// --samples` with a PATH holding nothing but Node (so no Debian ffmpeg), its banner names the encoder it
// found (the npm-shipped ffmpeg) and the other components, and its streaming demo streams the test scene
// in Chromium. Then the same data directory on the same machine with Xvfb and xterm installed: the demo
// streams the xterm, and the banner says so.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { chromium, type Browser, type Page } from 'playwright-core';
import { freePort, until } from '../api/test/helpers/wait.ts';
import { freeUdpRange, which } from '../streaming-app/test/helpers.ts';
import { CHROMIUM, CHROMIUM_ARGS, goto, waitForSnapshot } from './helpers/streaming-stack.ts';

const REPO = path.resolve(import.meta.dirname, '..');
const NODE_ONLY = path.dirname(process.execPath);
const missing = [['chromium', existsSync(CHROMIUM)], ['Xvfb', which('Xvfb')], ['xterm', which('xterm')]].filter(([, found]) => !found).map(([name]) => name);
const skip = missing.length && !process.env.CI ? `needs ${missing.join(', ')} (Debian packages chromium xvfb xterm)` : false;
if (skip) console.log(`# skipping the fresh-machine check: ${skip}`);

describe('npm start on a fresh machine', { skip }, () => {
  let dataDir = '';
  let browser: Browser;
  before(async () => {
    dataDir = mkdtempSync(path.join(os.tmpdir(), 'svc-fresh-'));
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
  });
  after(async () => {
    await browser?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** `svc serve --samples` on `dataDir` with `PATH`, until the test ends: its banner and the demo's page. */
  async function serve(t: TestContext, PATH: string): Promise<{ banner: string; page: Page }> {
    const udp = await freeUdpRange(12);
    const demoPort = await freePort();
    const child = spawn(process.execPath, [path.join(REPO, 'api/bin/svc.js'), 'serve', '--samples'], {
      cwd: REPO,
      env: {
        PATH, HOME: dataDir, TMPDIR: os.tmpdir(),
        SVC_DATA_DIR: dataDir, SVC_PORT: String(await freePort()), SVC_HOST: '127.0.0.1', SVC_DEMO_PROXY_PORT: String(demoPort),
        SVC_AGENT_UDP_PORT_RANGE: `${udp.min}-${udp.max}`, SVC_TURN_SERVER: 'none', SVC_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    t.after(async () => {
      child.kill('SIGTERM');
      await exited;
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => { out += chunk; });
    const banner = await until('the banner', async () => (/display .*\n/.test(out) ? out : undefined), 60_000);
    const url = /Streaming demo: open (\S+)/.exec(banner)?.[1];
    assert.ok(url, `the demo is offered: ${banner}`);
    // The demo proxy is its own process, still starting when the banner is printed.
    await until('the demo proxy listening', () => new Promise<boolean>((resolve) => {
      const probe = net.connect(demoPort, '127.0.0.1', () => resolve(Boolean(probe.end()))).on('error', () => resolve(false));
    }), 60_000);
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    t.after(() => context.close());
    const page = await context.newPage();
    // The sample's first instance may still be starting: the page waits in line for it.
    await goto(page, `${url}?autostart=1`);
    return { banner, page };
  }

  test('without a system ffmpeg or Xvfb: the banner names the npm ffmpeg, and the demo streams the test scene', async (t) => {
    const { banner, page } = await serve(t, NODE_ONLY);
    assert.match(banner, /encoder\s+ffmpeg from npm \(@ffmpeg-installer/, banner);
    assert.match(banner, /relay\s+none/);
    assert.match(banner, /display\s+no Xvfb .*test scene/, 'without Xvfb the demo is the test scene, and the banner says so');
    await waitForSnapshot(page, 'frames from the npm-shipped encoder', (s) => s.framesDecodedFromBarcode >= 10, 90_000);
    // The app's stats come over the input channel, which may open after the first frames.
    const stats = await waitForSnapshot(page, 'the app\'s stats', (s) => s.metrics.appEncoder !== undefined);
    assert.equal(stats.metrics.appEncoder, 'libx264');
    await page.evaluate('svcStream.bye("done")');
  });

  test('the same data directory once Xvfb and xterm are installed: the demo streams the xterm, and the banner says so', async (t) => {
    // What npm start wrote before the sample left the choice to its container: the scene, for good.
    const store = new Database(path.join(dataDir, 'svc.db'));
    store.prepare("UPDATE function_versions SET document = replace(document, '\"STREAMING_SOURCE\",\"value\":\"auto\"', '\"STREAMING_SOURCE\",\"value\":\"scene\"')").run();
    assert.equal(store.prepare("SELECT count(*) FROM function_versions WHERE document LIKE '%\"value\":\"scene\"%'").pluck().get(), 1);
    store.close();

    const { banner, page } = await serve(t, `${NODE_ONLY}:/usr/bin:/bin`);
    assert.match(banner, /display\s+Xvfb found .*streams an xterm/, banner);
    await until('a first frame', async () => (await page.evaluate('svcStream.meter.framesPresented') as number) > 0, 90_000);
    await waitForSnapshot(page, 'input open', (s) => s.state === 'streaming' && s.inputReady);
    // The xterm echoes what is typed, light on dark; the test scene would carry its barcode.
    const light = (): Promise<number> => page.evaluate(`(() => {
      const video = document.querySelector('video');
      const canvas = Object.assign(document.createElement('canvas'), { width: video.videoWidth, height: video.videoHeight });
      const ctx = canvas.getContext('2d');
      ctx.drawImage(video, 0, 0);
      const data = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
      let light = 0;
      for (let i = 0; i < data.length; i += 4) if (data[i] + data[i + 1] + data[i + 2] > 500) light++;
      return light;
    })()`) as Promise<number>;
    const before = await light();
    await page.evaluate("svcStream.sendText('typed into the xterm')");
    await until('the typed text on screen', async () => (await light()) > before + 100, 20_000);
    assert.equal((await waitForSnapshot(page, 'the stream', () => true)).framesDecodedFromBarcode, 0, 'no test-scene barcode');
    await page.evaluate('svcStream.bye("done")');
  });
});
