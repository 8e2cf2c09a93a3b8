// An X11 application through the whole platform, as a user meets it: a STREAMING function of the reference
// container running xterm on Xvfb (process runtime), the page over HTTPS through the proxy and the
// gateway, in headless Chromium. A typed key visibly changes the picture; the app exiting (Ctrl+D ends
// xterm's cat) ends the session, and the page says the app ended it.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { until } from '../api/test/helpers/wait.ts';
import { darkPixels, END_OF_INPUT, which } from '../streaming-app/test/helpers.ts';
import { CHROMIUM, goto, startStreamingStack, waitForSnapshot, type StreamingStack } from './helpers/streaming-stack.ts';

const missing = [['ffmpeg', existsSync('/usr/bin/ffmpeg')], ['chromium', existsSync(CHROMIUM)], ['Xvfb', which('Xvfb')], ['xterm', which('xterm')]]
  .filter(([, found]) => !found).map(([name]) => name);
const skip = missing.length && !process.env.CI ? `needs ${missing.join(', ')} (Debian packages ffmpeg chromium xvfb xterm)` : false;
if (skip) console.log(`# skipping the x11 streaming end-to-end test: ${skip}`);

describe('an X11 application streamed through the platform', { skip }, () => {
  let stack: StreamingStack;

  before(async () => {
    stack = await startStreamingStack({
      name: 'e2e-xterm',
      environment: [
        { key: 'STREAMING_SOURCE', value: 'x11' }, { key: 'STREAMING_AUDIO', value: 'false' },
        { key: 'STREAMING_APP_COMMAND', value: 'exec xterm -geometry 40x6+0+0 -fa Monospace -fs 14 -bg white -fg black -e cat' },
      ],
    });
  });
  after(() => stack?.close());

  test('typed keys change the picture; the app exiting ends the session with the app named as the reason', async (t) => {
    const page = await stack.context.newPage();
    t.after(() => page.close());
    await goto(page, stack.pageUrl('?autostart=1'));
    await waitForSnapshot(page, 'the xterm on screen, input open', (s) => s.state === 'streaming' && s.inputReady);
    await until('a first frame shown', async () => (await page.evaluate('svcStream.meter.framesPresented') as number) > 0);
    const firstLine = (): Promise<number> => darkPixels(page, 0, 2, 320, 20);
    const blank = await firstLine();
    await page.evaluate(`(() => {
      for (const [code, key] of [['KeyH', 'h'], ['KeyI', 'i']]) {
        svcStream.sendKeyCode(code, key, true, 0);
        svcStream.sendKeyCode(code, key, false, 0);
      }
    })()`);
    await until('the typed keys on screen', async () => (await firstLine()) > blank + 30);

    // Enter, then Ctrl+D: cat reads end of input and exits, xterm with it, and the session with the app.
    await page.evaluate(END_OF_INPUT);
    await waitForSnapshot(page, 'the session to end', (s) => s.state === 'ended');
    assert.match(String(await page.evaluate('svcStream.ended')), /the application exited with code 0/);
    assert.equal(await page.textContent('#message'), 'The app ended the session.');
  });
});
