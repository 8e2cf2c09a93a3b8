// The x11 source against real X11 applications: an xterm on Xvfb streamed to headless Chromium, where
// typed keys and text and a double-click visibly change the picture, the mouse wheel scrolls it, and
// Ctrl+D ends the app and with it the session; an app that crashes mid-session closes the browser's
// connection with 4502 and leaves no process behind; an app that plays a tone is heard in the browser (Opus packets with energy in getStats);
// start-up failures (no such app, no display) stop the container with one line.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type BrowserContext } from 'playwright-core';
import { CloseCode } from '../client/protocol.ts';
import { bgrxToI420 } from '../src/x11-capture.ts';
import { startXvfb, XConnection } from '../src/x11-display.ts';
import { X11Input } from '../src/x11-input.ts';
import {
  alive, audioStats, CHROMIUM, CHROMIUM_ARGS, darkPixels, descendants, END_OF_INPUT, FFMPEG, freeTcpPort, missingTools, PULSEAUDIO, runToExit, startApp, TONE,
  WeriftViewer, XTERM, XVFB,
  type AppProcess,
} from './helpers.ts';

const skip = missingTools([FFMPEG, CHROMIUM, XVFB, XTERM]);
if (skip) console.log(`# skipping the x11 source tests: ${skip}`);

const WIDTH = 640;
const HEIGHT = 360;
/**
 * An xterm below the barcode strip, echoing what is typed (cat, no shell); Ctrl+D at a line start ends it.
 * Its selection goes to CLIPBOARD (selectToClipboard), as a copy would in most applications.
 */
const XTERM_CAT = "exec xterm -geometry 40x6+0+40 -fa Monospace -fs 14 -bg white -fg black -xrm 'XTerm*selectToClipboard: true' -e cat";
const X11_ENV = { STREAMING_SOURCE: 'x11', STREAMING_VIDEO_SIZE: `${WIDTH}x${HEIGHT}`, STREAMING_FRAME_BARCODE: 'true', STREAMING_AUDIO: 'false' };

type Snapshot = { framesDecodedFromBarcode: number; ended?: string };

async function until<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function clientUrl(app: AppProcess): string {
  return `http://127.0.0.1:${app.streamingPort}/client/?autostart=1&signal=${encodeURIComponent(app.signalingUrl())}`;
}

test('the capture converts BGRX to video-range BT.601 I420, only inside the rectangle it is given', () => {
  const [width, height] = [4, 2];
  const screen = Buffer.alloc(width * height * 4);
  const pixels = [[255, 255, 255], [255, 255, 255], [0, 0, 255], [0, 0, 255]]; // BGR: white, white, red, red
  pixels.forEach(([b, g, r], x) => [x, x + width].forEach((i) => screen.set([b, g, r, 0], i * 4)));
  const picture = Buffer.alloc(width * height * 1.5, 7);
  bgrxToI420(screen, picture, width, height, { x: 0, y: 0, width: 2, height: 2 });
  assert.deepEqual([...picture.subarray(0, 2), picture[width], picture[width + 1]], [235, 235, 235, 235], 'white luma');
  assert.deepEqual([picture[8], picture[10]], [128, 128], 'white chroma');
  bgrxToI420(screen, picture, width, height, { x: 2, y: 0, width: 2, height: 2 });
  assert.deepEqual([picture[2], picture[9], picture[11]], [82, 90, 240], 'red: Y, U, V');
  const untouched = Buffer.alloc(width * height * 1.5, 7);
  bgrxToI420(screen, untouched, width, height, { x: 2, y: 0, width: 2, height: 2 });
  assert.deepEqual([...untouched.subarray(0, 2), untouched[8], untouched[10]], [7, 7, 7, 7], 'outside the rectangle nothing changes');
});

test('XTEST input: absolute and relative pointer, buttons and modifiers, all released at the end', { skip }, async (t) => {
  const server = await startXvfb('Xvfb', WIDTH, HEIGHT);
  t.after(() => server.stop());
  const x = await XConnection.open(server.display);
  t.after(() => x.close());
  const input = await X11Input.create(x);
  const BUTTON1 = 1 << 8;
  const SHIFT = 1;
  input.apply({ type: 'pointer', seq: 1, t: 0, x: 0.5, y: 0.25 });
  assert.deepEqual(await x.pointer().then((p) => [p.rootX, p.rootY]), [320, 90]);
  input.apply({ type: 'move', seq: 2, t: 0, dx: 15, dy: -10 });
  assert.deepEqual(await x.pointer().then((p) => [p.rootX, p.rootY]), [335, 80], 'relative motion (pointer lock)');
  input.apply({ type: 'button', seq: 3, t: 0, button: 0, down: true });
  input.apply({ type: 'key', seq: 4, t: 0, key: 'A', code: 'KeyA', down: true, mods: 1 });
  assert.equal((await x.pointer()).keyMask, BUTTON1 | SHIFT, 'button 1 held, and shift pressed to match the modifier bits');
  assert.equal(input.apply({ type: 'key', seq: 5, t: 0, key: 'x', code: 'NoSuchKey', down: false }), false, 'an unknown key is refused (counted as dropped)');
  input.releaseAll();
  assert.equal((await x.pointer()).keyMask, 0, 'nothing stays held');
});

describe('x11 source', { skip }, () => {
  let context: BrowserContext;
  let profile = '';
  before(async () => {
    profile = await mkdtemp(join(tmpdir(), 'svc-chromium-'));
    // The page's start button provides the user gesture audio needs; here the policy is lifted instead.
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM.path, args: [...CHROMIUM_ARGS, '--autoplay-policy=no-user-gesture-required'], headless: true,
    });
  });
  after(async () => {
    await context?.close();
    await rm(profile, { recursive: true, force: true });
  });

  test('an xterm streams to Chromium; keys, text, the cursor and a double-click change the picture; clipboard both ways; Ctrl+D ends app and session', async (t) => {
    const app = await startApp({ ...X11_ENV, STREAMING_APP_COMMAND: XTERM_CAT });
    t.after(() => app.stop());
    const helpers = descendants(app.pid);
    assert.ok(helpers.length >= 2, 'Xvfb and the application run as children of the container');
    const page = await context.newPage();
    t.after(() => page.close());
    await page.goto(clientUrl(app));
    const snapshot = (): Promise<Snapshot> => page.evaluate('svcStream.snapshot()') as Promise<Snapshot>;
    // A still desktop is sent about once a second (unchanged frames are not encoded): wait for the first.
    await until('a frame with a readable barcode', snapshot, (s) => s.framesDecodedFromBarcode >= 1);

    const textArea = (): Promise<number> => darkPixels(page, 0, 40, WIDTH, 120);
    const blank = await textArea();
    // Physical keys with modifiers (Shift+H), then text that goes by keysym.
    await page.evaluate(`(() => {
      svcStream.sendKeyCode('ShiftLeft', 'Shift', true, 1);
      svcStream.sendKeyCode('KeyH', 'H', true, 1);
      svcStream.sendKeyCode('KeyH', 'H', false, 1);
      svcStream.sendKeyCode('ShiftLeft', 'Shift', false, 0);
      svcStream.sendKeyCode('KeyI', 'i', true, 0);
      svcStream.sendKeyCode('KeyI', 'i', false, 0);
      svcStream.sendText(' streaming world');
    })()`);
    const typed = await until('the typed text on screen', textArea, (dark) => dark > blank + 150);
    t.diagnostic(`dark pixels: ${blank} blank, ${typed} after typing`);

    // The pointer's cursor is drawn into the picture (an I-beam over the xterm's white background).
    const cursorBox = (): Promise<number> => darkPixels(page, 240, 110, 24, 24);
    assert.equal(await cursorBox(), 0, 'nothing drawn there yet');
    await page.evaluate(`svcStream.sendPointer(${250 / WIDTH}, ${120 / HEIGHT})`);
    await until('the cursor where the pointer is', cursorBox, (dark) => dark > 5);

    // A double-click on "streaming" selects it: xterm shows it in reverse video.
    await page.evaluate(`(() => {
      svcStream.sendPointer(${60 / WIDTH}, ${52 / HEIGHT});
      for (const down of [true, false, true, false]) svcStream.sendButton(0, down);
    })()`);
    const selected = await until('the selection highlight', textArea, (dark) => dark > typed + 800);
    t.diagnostic(`dark pixels after the double-click: ${selected}`);

    // Clipboard both ways: the word xterm copied reaches the browser; the browser's text, put on the
    // display's clipboard, is pasted by a middle-click at the end of the typed line.
    await until('the copied word in the browser', () => page.evaluate('svcStream.input.clipboardText'), (text) => text === 'streaming');
    const rightOfText = (): Promise<number> => darkPixels(page, 230, 44, 190, 20); // the xterm is about 440 pixels wide
    assert.equal(await rightOfText(), 0, 'nothing typed there yet');
    await page.evaluate(`(() => {
      svcStream.input.sendClipboard('pasted from the browser');
      for (const down of [true, false]) svcStream.sendButton(1, down);
    })()`);
    await until('the pasted text', rightOfText, (dark) => dark > 100);

    // Enter, then Ctrl+D: cat reads end of input and exits 0, xterm with it.
    await page.evaluate(END_OF_INPUT);
    const ended = await until('the session to end', snapshot, (s) => s.ended !== undefined);
    assert.match(String(ended.ended), /the application exited with code 0/);
    assert.deepEqual(await app.exited, { code: 0, signal: null });
    assert.deepEqual(alive(helpers), [], 'no helper process outlives the container');
  });

  test('wheel events reach the application: the mouse wheel over an xterm scrolls its history back into view', async (t) => {
    // Thirty numbered lines, then blank ones until only blanks are left on the xterm's six rows.
    const app = await startApp({ ...X11_ENV, STREAMING_APP_COMMAND: `exec xterm -geometry 40x6+0+40 -fa Monospace -fs 14 -bg white -fg black -e sh -c 'seq 1 30; printf "\\n\\n\\n\\n\\n\\n"; exec cat'` });
    t.after(() => app.stop());
    const page = await context.newPage();
    t.after(() => page.close());
    await page.goto(clientUrl(app));
    await until('a frame with a readable barcode', () => page.evaluate('svcStream.snapshot()') as Promise<Snapshot>, (s) => s.framesDecodedFromBarcode >= 1);
    // The xterm's first columns, where the numbers were (away from the pointer, which is drawn in).
    const numbers = (): Promise<number> => darkPixels(page, 0, 40, 40, 100);
    // The real wheel of the page's mouse over the xterm (the video fills the page at twice its size).
    const box = await page.locator('video').boundingBox();
    assert.ok(box);
    const scale = Math.min(box.width / WIDTH, box.height / HEIGHT);
    await page.mouse.move(box.x + (box.width - WIDTH * scale) / 2 + 200 * scale, box.y + (box.height - HEIGHT * scale) / 2 + 80 * scale);
    const blank = await numbers();
    await page.mouse.wheel(0, -500);
    const scrolled = await until('the numbered lines back on screen', numbers, (dark) => dark > blank + 150);
    t.diagnostic(`dark pixels: ${blank} at the bottom of the history, ${scrolled} after the wheel`);
    await page.evaluate('svcStream.bye("test done")');
    assert.equal((await app.exited).code, 0);
  });

  test('a still screen answers a PLI with a keyframe; an application crash closes the connection with 4502; nothing is left behind', async (t) => {
    // The shell is the application: told to (SIGUSR1), it exits 3 while the xterm it started is still up.
    const app = await startApp({ ...X11_ENV, STREAMING_APP_COMMAND: "trap 'exit 3' USR1; xterm -geometry 20x4+0+40 & while :; do sleep 0.1; done" });
    t.after(() => app.stop());
    const viewer = new WeriftViewer(app.signalingUrl());
    t.after(() => viewer.close());
    await viewer.hello();
    await viewer.waitForFrames(1);
    // Nothing changes on screen, so no frame is grabbed unless the fresh encoder process asks for one.
    const keyframes = viewer.keyframes;
    await viewer.sendPli();
    await until('a keyframe after the PLI', async () => viewer.keyframes, (n) => n > keyframes);
    const helpers = descendants(app.pid);
    const appPid = Number(app.logs.find((l) => l.msg === 'application window mapped')?.appPid);
    process.kill(appPid, 'SIGUSR1');
    const closed = await viewer.signaling.closed;
    assert.equal(closed.code, CloseCode.applicationExited);
    assert.match(closed.reason, /exited with code 3/);
    assert.equal((await app.exited).code, 1, 'a crashed application is a failed container');
    assert.deepEqual(alive(helpers), [], 'Xvfb, the xterm and the capture are gone');
  });

  test('the sound of the application reaches the browser as Opus', { skip: missingTools([PULSEAUDIO]) }, async (t) => {
    // A window to wait for, and a tone played into the container's sound server.
    const app = await startApp({ ...X11_ENV, STREAMING_AUDIO: 'true', STREAMING_APP_COMMAND: `xterm -geometry 20x4+0+40 & exec ${TONE}` });
    t.after(() => app.stop());
    const page = await context.newPage();
    t.after(() => page.close());
    await page.goto(clientUrl(app));
    const stats = await until('100 audio packets with sound in them', () => audioStats(page), (s) => (s.packetsReceived ?? 0) >= 100 && (s.totalAudioEnergy ?? 0) > 0);
    t.diagnostic(`audio: ${stats.packetsReceived} packets, codec ${stats.codec}, energy ${stats.totalAudioEnergy}`);
    assert.equal(stats.codec?.toLowerCase(), 'audio/opus');
    await page.evaluate('svcStream.bye("test done")');
    assert.equal((await app.exited).code, 0);
  });

  test('with STREAMING_LIP_SYNC=true the page holds the picture back to meet the sound as heard', { skip: missingTools([PULSEAUDIO]) }, async (t) => {
    const app = await startApp({ ...X11_ENV, STREAMING_AUDIO: 'true', STREAMING_LIP_SYNC: 'true', STREAMING_APP_COMMAND: `xterm -geometry 20x4+0+40 & exec ${TONE}` });
    t.after(() => app.stop());
    const page = await context.newPage();
    t.after(() => page.close());
    await page.goto(clientUrl(app));
    // The sound plays through the browser's output buffer and jitter buffer; the picture at once: it waits.
    const holdMs = await until('the picture held back', () => page.evaluate(`svcStream.client.peerConnection?.getReceivers()
      .find((receiver) => receiver.track.kind === 'video')?.jitterBufferTarget ?? 0`) as Promise<number>, (ms) => ms > 0, 20_000);
    t.diagnostic(`picture held ${holdMs} ms`);
    await page.evaluate('svcStream.bye("test done")');
  });

  test('start-up failures stop the container with one line, before it ever listens', async () => {
    const cases: [Record<string, string>, RegExp][] = [
      [{ STREAMING_APP_COMMAND: 'no-such-app-xyz' }, /the application exited with code 127 before showing a window: .*not found/],
      [{ STREAMING_APP_COMMAND: 'true' }, /the application exited with code 0 before showing a window/],
      [{ STREAMING_APP_COMMAND: 'xterm', STREAMING_DISPLAY: ':4077' }, /cannot open X display :4077/],
      [{ STREAMING_APP_COMMAND: 'xterm', STREAMING_AUDIO: 'true', PULSEAUDIO_PATH: '/bin/false' }, /PulseAudio did not start/],
    ];
    for (const [env, message] of cases) {
      const ports = { CONTROL_SERVER_PORT: String(await freeTcpPort()), STREAMING_SERVER_PORT: String(await freeTcpPort()) };
      const run = await runToExit({ ...X11_ENV, ...ports, ...env });
      assert.equal(run.code, 1, JSON.stringify(env));
      const lines = run.stderr.trim().split('\n');
      assert.equal(lines.length, 1, run.stderr);
      assert.match(lines[0], message);
      assert.doesNotMatch(run.stdout, /streaming app listening/, 'never listened, so ready never answered 200');
    }
  });
});
