// The whole streaming path in headless Chromium: page over HTTPS (self-signed, accepted) → intermediary
// proxy (user token checked against a JWKS) → gateway → session broker → the reference streaming
// container, with coturn relaying for relay-only ICE. Nothing is mocked: every piece is the real process.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import type http from 'node:http';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { WebSocket } from 'ws';
import { FAST_AUTOSCALER } from '../api/test/helpers/autoscaler-platform.ts';
import { running, waitFor } from '../api/test/helpers/functions.ts';
import { freeTcpPort, freeUdpRange } from '../streaming-app/test/helpers.ts';
import { until } from '../api/test/helpers/wait.ts';
import { boundMs, CHROMIUM, goto, startStreamingStack, waitForSnapshot, type Snapshot, type StreamingStack } from './helpers/streaming-stack.ts';

const tools = [['ffmpeg', '/usr/bin/ffmpeg'], ['chromium', CHROMIUM], ['coturn', '/usr/bin/turnserver']].filter(([, file]) => !existsSync(file));
const skip = tools.length && !process.env.CI ? `needs ${tools.map(([name]) => name).join(', ')} (Debian packages ffmpeg chromium coturn)` : false;
if (skip) console.log(`# skipping the streaming end-to-end test: ${skip}`);

describe('streaming end to end: Chromium → proxy → gateway → container', { skip }, () => {
  let stack: StreamingStack;

  before(async () => {
    const relay = await freeUdpRange(30);
    stack = await startStreamingStack({
      name: 'e2e-stream',
      config: {
        turn: { server: 'coturn', port: await freeTcpPort(), relayPortRange: `${relay.min}-${relay.max}` },
        streaming: { resumeWindowSeconds: 60 },
      },
    });
  });
  after(() => stack?.close());

  test('the proxy refuses a bad user token with 401 and a token for another function with 403, with CORS', async () => {
    const refusal = (token: string) => new Promise<{ status: number; headers: http.IncomingHttpHeaders }>((resolve, reject) => {
      const ws = new WebSocket(`wss://localhost:${stack.proxyPort}/sign_in`, [`token.${token}`], { rejectUnauthorized: false });
      ws.once('unexpected-response', (_req, response) => resolve({ status: response.statusCode ?? 0, headers: response.headers }));
      ws.once('open', () => reject(new Error('opened')));
      ws.once('error', () => {});
    });
    const forged = await refusal(await stack.idp.signWithStrangerKey([stack.fn.id]));
    assert.equal(forged.status, 401);
    const other = await refusal(await stack.idp.sign(['00000000-0000-4000-8000-000000000000']));
    assert.equal(other.status, 403);
    for (const response of [forged, other]) {
      assert.equal(response.headers['access-control-allow-origin'], '*');
      assert.equal(response.headers['access-control-expose-headers'], '*');
      assert.match(String(response.headers['content-type']), /^application\/problem\+json/);
    }
  });

  test('frames decode over HTTPS through the proxy; a dropped WebSocket resumes on the same instance; bye brings a fresh instance', async (t) => {
    const page = await stack.context.newPage();
    t.after(() => page.close());
    await goto(page, stack.pageUrl('?autostart=1'));
    await waitForSnapshot(page, '30 decoded frames', (s) => s.framesDecodedFromBarcode >= 30);
    const session = await page.evaluate('svcStream.client.config.sessionId') as string;
    const instanceBefore = (await stack.svc.api('GET', `/v2/svc/functions/${stack.fn.id}/versions/${stack.fn.versionId}`, { bearer: stack.key })).body.function.activeInstances[0].instanceId;
    const cookies = await stack.context.cookies(`https://localhost:${stack.proxyPort}`);
    const sessionCookie = cookies.find((cookie) => cookie.name === 'svc-request-id');
    assert.ok(sessionCookie, 'the platform session cookie, aligned to the proxy');
    assert.equal(sessionCookie.secure, true);

    await page.evaluate('svcStream.dropSocket()');
    const frames = (await page.evaluate('svcStream.snapshot()') as Snapshot).framesDecodedFromBarcode;
    await waitForSnapshot(page, 'frames after the resume', (s) => s.status === 'resumed' && s.framesDecodedFromBarcode >= frames + 20);
    assert.equal(await page.evaluate('svcStream.client.config.sessionId'), session, 'the same session on the same container');

    await page.evaluate('svcStream.bye("test done")');
    const fresh = await waitFor(stack.svc, stack.key, stack.fn, (record) => running(record) && record.activeInstances.every((instance: any) => instance.instanceId !== instanceBefore), 60_000);
    assert.equal(fresh.activeInstances[0].instanceStatus, 'RUNNING');
  });

  test('relay-only ICE through the platform TURN server', async (t) => {
    const page = await stack.context.newPage();
    t.after(() => page.close());
    // The previous session's cookie is still in the browser: the client's sign-in replaces it.
    await goto(page, stack.pageUrl('?autostart=1&relay=1'));
    const snapshot = await waitForSnapshot(page, 'frames over the relay', (s) => s.framesDecodedFromBarcode >= 30 && s.metrics.localCandidateType !== undefined, 45_000);
    assert.equal(snapshot.metrics.localCandidateType, 'relay');
    await page.evaluate('svcStream.bye("test done")');
  });

  test('A streams, B waits in line with its place shown, A closes the tab, B streams without ever seeing an error', async (t) => {
    await waitFor(stack.svc, stack.key, stack.fn, running, 60_000);
    const a = await stack.context.newPage();
    t.after(() => a.close());
    await goto(a, stack.pageUrl());
    assert.equal(await a.textContent('#app-name'), 'e2e-stream', 'the start screen names the app');
    await a.click('#action');
    await waitForSnapshot(a, 'A streaming', (s) => s.framesDecodedFromBarcode >= 10);

    const b = await stack.context.newPage();
    t.after(() => b.close());
    await goto(b, stack.pageUrl());
    // The start screen says why B cannot start at once: the only instance is A's (not "being prepared").
    await b.waitForFunction(`/in use/.test(document.getElementById('message')?.textContent ?? '')`, undefined, { timeout: 10_000 });
    assert.equal(await b.textContent('#message'), 'The instance is in use; press Start to wait in line.');
    await b.evaluate(`window.seen = []; new MutationObserver(() => seen.push(document.body.dataset.state + ': ' + document.getElementById('message').textContent))
      .observe(document.body, { attributes: true, subtree: true, childList: true, characterData: true })`);
    await b.click('#action');
    await b.waitForSelector('#place:visible');
    assert.equal(await b.textContent('#place'), '#1');
    assert.match(String(await b.textContent('#message')), /You are #1 in line/);

    await a.close({ runBeforeUnload: true });
    // Bounded wait: the next person streams within 5 s of the tab closing (the time itself is in bench/stream).
    await waitForSnapshot(b, 'B streaming after A left', (s) => s.state === 'streaming' && s.framesDecodedFromBarcode >= 10, boundMs(5000));
    const seen = await b.evaluate('seen') as string[];
    assert.ok(seen.every((entry) => /^(start|connecting|waiting|streaming):/.test(entry)), `B only ever saw its place and the stream: ${seen.join(' | ')}`);
    await b.click('#stop');
    assert.equal(await b.evaluate('svcStream.state'), 'ended');
    assert.equal(await b.textContent('#message'), 'You ended the session.');
  });

  test('a WebSocket that connects and says nothing gives its instance to the next person within 5 s', async (t) => {
    // The silent socket takes the instance as soon as one is free (its open waits in line like anyone).
    let refused = 'nothing yet';
    const silent = await until('the silent socket taking an instance', () => new Promise<WebSocket | undefined>((resolve) => {
      const ws = new WebSocket(`wss://localhost:${stack.proxyPort}/sign_in`, [`token.${stack.userToken}`, `function-id.${stack.fn.id}`], { rejectUnauthorized: false });
      ws.once('open', () => resolve(ws));
      ws.once('error', (error) => {
        refused = error.message;
        resolve(undefined);
      });
    }), 60_000).catch((error: Error) => {
      // Seen once in CI on a slow machine: say how the sign-in was refused, for whoever meets it next.
      throw new Error(`${error.message}; the last refusal: ${refused}`);
    });
    const closedBy = new Promise<number>((resolve) => silent.once('close', resolve));
    const page = await stack.context.newPage();
    t.after(() => page.close());
    await goto(page, stack.pageUrl('?autostart=1'));
    await page.waitForSelector('#place:visible');
    await waitForSnapshot(page, 'granted after the silent socket', (s) => s.state !== 'waiting' && s.state !== 'start', boundMs(5000));
    assert.equal(await closedBy, 4400, 'the container closed the silent connection');
    await waitForSnapshot(page, 'frames', (s) => s.framesDecodedFromBarcode >= 10);
  });
});

describe('ten people arriving at a two-instance function with spare: 1', { skip }, () => {
  let stack: StreamingStack;

  before(async () => {
    stack = await startStreamingStack({
      name: 'e2e-ten', video: '320x180', config: { autoscaler: FAST_AUTOSCALER },
      spec: { minInstances: 1, maxInstances: 2, autoscalingConfiguration: { spare: 1 } },
    });
  });
  after(() => stack?.close());

  test('are all served, in the order they arrived, each streaming briefly and then closing the tab', async () => {
    const arrivals: { page: Page; sessionId: string }[] = [];
    for (let person = 0; person < 10; person++) {
      const page = await stack.context.newPage();
      await goto(page, stack.pageUrl('?autostart=1'));
      // Arrived: the platform has answered the first sign-in (a grant or a place in line).
      const sessionId = await until(`person ${person} signed in`, () => page.evaluate('svcStream.client?.sessionId') as Promise<string | undefined>);
      arrivals.push({ page, sessionId });
    }
    await Promise.all(arrivals.map(async ({ page }, person) => {
      await waitForSnapshot(page, `person ${person} streaming`, (s) => s.state === 'streaming' && s.framesDecodedFromBarcode >= 5, 180_000);
      await page.close({ runBeforeUnload: true });
    }));
    const granted = stack.svc.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'streaming session granted').map((entry) => entry.sessionId);
    assert.deepEqual(granted, arrivals.map((arrival) => arrival.sessionId), 'granted first come, first served');
    const scaled = stack.svc.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'scaling decision');
    assert.ok(scaled.some((entry) => entry.desired === 2 && /spare/.test(entry.detail)), 'the spare instance followed the first session');
  });
});
