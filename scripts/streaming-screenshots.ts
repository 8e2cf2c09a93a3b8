// The client page in each of its states, as PNGs for docs/streaming-app.md (docs/images/streaming-*.png):
// the real platform, proxy and container, driven in headless Chromium at 1280x720.
//
//   node scripts/streaming-screenshots.ts
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Page } from 'playwright-core';
import { request } from '../api/test/helpers/http.ts';
import { startStreamingStack, waitForSnapshot } from '../test/helpers/streaming-stack.ts';

const OUT = path.resolve(import.meta.dirname, '../docs/images');
mkdirSync(OUT, { recursive: true });
const stack = await startStreamingStack({ name: 'pointer-scene', video: '1280x720', config: { log: { level: 'warn' } } });
const shot = async (page: Page, name: string) => {
  await page.screenshot({ path: path.join(OUT, `streaming-${name}.png`) });
  console.log(`docs/images/streaming-${name}.png`);
};
const ended = (page: Page) => page.waitForFunction('svcStream.state === "ended"', undefined, { timeout: 30_000 });

try {
  const a = await stack.context.newPage();
  await a.goto(stack.pageUrl());
  await a.waitForFunction('document.getElementById("message").textContent !== ""');
  await shot(a, 'start');

  await a.click('#action');
  await waitForSnapshot(a, 'frames', (s) => s.framesDecodedFromBarcode >= 60);
  await a.mouse.move(640, 700);
  await a.hover('#toolbar');
  await shot(a, 'live');
  await a.keyboard.press('F8');
  await sleep(2500);
  await shot(a, 'stats');
  await a.keyboard.press('F8');

  const b = await stack.context.newPage();
  await b.goto(stack.pageUrl());
  await b.click('#action');
  await b.waitForSelector('#place:visible');
  await shot(b, 'waiting');

  await a.click('#stop');
  await ended(a);
  await shot(a, 'ended');

  await waitForSnapshot(b, 'B streaming', (s) => s.state === 'streaming' && s.framesDecodedFromBarcode >= 10);
  // The platform ends B's session (as an operator's DELETE would): the app says bye as it stops.
  const sessionId = await b.evaluate('svcStream.client.sessionId') as string;
  await request(stack.svc.url, 'DELETE', '/sign_in', { host: 'api.localhost', bearer: stack.key, headers: { 'x-svc-absorb': 'true', 'svc-reqid': sessionId } });
  await ended(b);
  await shot(b, 'app-ended');

  await stack.context.clearCookies();
  const signedOut = await stack.context.newPage();
  await signedOut.goto(stack.pageUrl());
  await signedOut.click('#action');
  await ended(signedOut);
  await shot(signedOut, 'sign-in');

  await stack.context.addCookies([{ name: 'svc-user-token', value: await stack.idp.sign(['00000000-0000-4000-8000-000000000000']), domain: 'localhost', path: '/', secure: true, sameSite: 'None' }]);
  const other = await stack.context.newPage();
  await other.goto(stack.pageUrl());
  await other.click('#action');
  await ended(other);
  await shot(other, 'forbidden');

  const offline = await stack.context.newPage();
  await offline.goto(stack.pageUrl('?signal=wss://localhost:1/sign_in'));
  await offline.click('#action');
  await ended(offline);
  await shot(offline, 'unreachable');
} finally {
  await stack.close();
}
