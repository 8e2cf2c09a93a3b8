// `npm start` on a machine with only Node.js 24 and what npm installed: the platform runs as `svc serve
// --samples` with a PATH holding nothing but Node (so no Debian ffmpeg), its banner names the encoder it
// found (the npm-shipped ffmpeg) and the other components, and its streaming demo streams in Chromium.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { chromium } from 'playwright-core';
import { freePort, until } from '../api/test/helpers/wait.ts';
import { freeUdpRange } from '../streaming-app/test/helpers.ts';
import { CHROMIUM, CHROMIUM_ARGS, goto, waitForSnapshot } from './helpers/streaming-stack.ts';

const REPO = path.resolve(import.meta.dirname, '..');
const skip = !existsSync(CHROMIUM) && !process.env.CI ? 'needs chromium (Debian package chromium)' : false;
if (skip) console.log(`# skipping the fresh-machine check: ${skip}`);

test('npm start without a system ffmpeg: the banner names the npm ffmpeg, and the streaming demo streams', { skip }, async (t) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'svc-fresh-'));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const udp = await freeUdpRange(12);
  const demoPort = await freePort();
  const serve = spawn(process.execPath, [path.join(REPO, 'api/bin/svc.js'), 'serve', '--samples'], {
    cwd: REPO,
    env: {
      PATH: path.dirname(process.execPath), HOME: dataDir, TMPDIR: os.tmpdir(),
      SVC_DATA_DIR: dataDir, SVC_PORT: String(await freePort()), SVC_HOST: '127.0.0.1', SVC_DEMO_PROXY_PORT: String(demoPort),
      SVC_AGENT_UDP_PORT_RANGE: `${udp.min}-${udp.max}`, SVC_TURN_SERVER: 'none', SVC_LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) => serve.once('exit', resolve));
  t.after(async () => {
    serve.kill('SIGTERM');
    await exited;
  });
  let out = '';
  serve.stdout.on('data', (chunk: Buffer) => { out += chunk; });
  const banner = await until('the banner', async () => (/display .*\n/.test(out) ? out : undefined), 60_000);

  assert.match(banner, /encoder\s+ffmpeg from npm \(@ffmpeg-installer/, banner);
  assert.match(banner, /relay\s+none/);
  assert.match(banner, /display\s+no Xvfb .*test scene/, 'without Xvfb the demo is the test scene, and the banner says so');
  const url = /Streaming demo: open (\S+)/.exec(banner)?.[1];
  assert.ok(url, 'the demo is offered');

  // The demo proxy is its own process, still starting when the banner is printed.
  await until('the demo proxy listening', () => new Promise<boolean>((resolve) => {
    const probe = net.connect(demoPort, '127.0.0.1', () => resolve(Boolean(probe.end()))).on('error', () => resolve(false));
  }), 60_000);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
  after(() => browser.close());
  const page = await (await browser.newContext({ ignoreHTTPSErrors: true })).newPage();
  // The sample's first instance may still be starting: the page waits in line for it.
  await goto(page, `${url}?autostart=1`);
  await waitForSnapshot(page, 'frames from the npm-shipped encoder', (s) => s.framesDecodedFromBarcode >= 10, 90_000);
  assert.equal(await page.evaluate('svcStream.snapshot().then((s) => s.metrics.appEncoder)'), 'libx264');
  await page.evaluate('svcStream.bye("done")');
});
