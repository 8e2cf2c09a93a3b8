// An X11 application through the whole platform, as a user meets it: a STREAMING function of the reference
// container running xterm on Xvfb (process runtime), the page over HTTPS through the proxy and the
// gateway, in headless Chromium. A typed key visibly changes the picture; the app exiting (Ctrl+D ends
// xterm's cat) ends the session, and the page says the app ended it.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { until } from '../api/test/helpers/wait.ts';
import { which } from '../streaming-app/test/helpers.ts';
import { CHROMIUM, goto, startStreamingStack, waitForSnapshot, type StreamingStack } from './helpers/streaming-stack.ts';

const missing = [['ffmpeg', existsSync('/usr/bin/ffmpeg')], ['chromium', existsSync(CHROMIUM)], ['Xvfb', which('Xvfb')], ['xterm', which('xterm')]]
  .filter(([, found]) => !found).map(([name]) => name);
const skip = missing.length && !process.env.CI ? `needs ${missing.join(', ')} (Debian packages ffmpeg chromium xvfb xterm)` : false;
if (skip) console.log(`# skipping the x11 streaming end-to-end test: ${skip}`);

/** Dark pixels in the top text line of the video as shown (xterm: black text on white). */
function darkPixelsInFirstLine(page: Page): Promise<number> {
  return page.evaluate(`(() => {
    const video = document.querySelector('video');
    const canvas = document.createElement('canvas');
    canvas.width = 320;
    canvas.height = 20;
    const ctx = canvas.getContext('2d');
    ctx.drawImage(video, 0, 2, 320, 20, 0, 0, 320, 20);
    const data = ctx.getImageData(0, 0, 320, 20).data;
    let dark = 0;
    for (let i = 0; i < data.length; i += 4) if (data[i] + data[i + 1] + data[i + 2] < 200) dark++;
    return dark;
  })()`) as Promise<number>;
}

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
    const blank = await darkPixelsInFirstLine(page);
    await page.evaluate(`(() => {
      for (const [code, key] of [['KeyH', 'h'], ['KeyI', 'i']]) {
        svcStream.sendKeyCode(code, key, true, 0);
        svcStream.sendKeyCode(code, key, false, 0);
      }
    })()`);
    await until('the typed keys on screen', async () => (await darkPixelsInFirstLine(page)) > blank + 30);

    // Enter, then Ctrl+D: cat reads end of input and exits, xterm with it, and the session with the app.
    await page.evaluate(`(() => {
      svcStream.sendKeyCode('Enter', 'Enter', true, 0);
      svcStream.sendKeyCode('Enter', 'Enter', false, 0);
      svcStream.sendKeyCode('ControlLeft', 'Control', true, 2);
      svcStream.sendKeyCode('KeyD', 'd', true, 2);
      svcStream.sendKeyCode('KeyD', 'd', false, 2);
      svcStream.sendKeyCode('ControlLeft', 'Control', false, 0);
    })()`);
    await waitForSnapshot(page, 'the session to end', (s) => s.state === 'ended');
    assert.match(String(await page.evaluate('svcStream.ended')), /the application exited with code 0/);
    assert.equal(await page.textContent('#message'), 'The app ended the session.');
  });
});
