// An X11 application through the whole platform, as a user meets it: a STREAMING function of the reference
// container running xterm on Xvfb with a tone playing (process runtime), the page over HTTPS through the
// proxy and the gateway, in headless Chromium, started with its Start button. Typed keys and a
// double-click of the mouse visibly change the picture; the tone arrives as Opus packets with sound in
// them; the app exiting (Ctrl+D ends xterm's cat) ends the session, and the page says the app ended it.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { until } from '../api/test/helpers/wait.ts';
import { audioStats, darkPixels, END_OF_INPUT, TONE, which } from '../streaming-app/test/helpers.ts';
import { CHROMIUM, goto, startStreamingStack, waitForSnapshot, type StreamingStack } from './helpers/streaming-stack.ts';

const missing = [['ffmpeg', existsSync('/usr/bin/ffmpeg')], ['chromium', existsSync(CHROMIUM)], ['Xvfb', which('Xvfb')], ['xterm', which('xterm')],
  ['pulseaudio', which('pulseaudio')]].filter(([, found]) => !found).map(([name]) => name);
const skip = missing.length && !process.env.CI ? `needs ${missing.join(', ')} (Debian packages ffmpeg chromium xvfb xterm pulseaudio)` : false;
if (skip) console.log(`# skipping the x11 streaming end-to-end test: ${skip}`);

/** Where a point of the video's picture is on the page (the picture is letterboxed into the element). */
async function onPage(page: Page, x: number, y: number): Promise<{ x: number; y: number }> {
  return page.evaluate(`(() => {
    const video = document.querySelector('video');
    const box = video.getBoundingClientRect();
    const scale = Math.min(box.width / video.videoWidth, box.height / video.videoHeight);
    return {
      x: box.left + (box.width - video.videoWidth * scale) / 2 + ${x} * scale,
      y: box.top + (box.height - video.videoHeight * scale) / 2 + ${y} * scale,
    };
  })()`) as Promise<{ x: number; y: number }>;
}

describe('an X11 application streamed through the platform', { skip }, () => {
  let stack: StreamingStack;

  before(async () => {
    stack = await startStreamingStack({
      name: 'e2e-xterm',
      environment: [
        { key: 'STREAMING_SOURCE', value: 'x11' }, { key: 'STREAMING_AUDIO', value: 'true' },
        // The tone runs in the app's process group, so it ends with the xterm.
        { key: 'STREAMING_APP_COMMAND', value: `${TONE} & exec xterm -geometry 40x6+0+0 -fa Monospace -fs 14 -bg white -fg black -e cat` },
      ],
    });
  });
  after(() => stack?.close());

  test('typed keys and a double-click change the picture, the tone is heard, the app exiting ends the session naming it', async (t) => {
    const page = await stack.context.newPage();
    t.after(() => page.close());
    await goto(page, stack.pageUrl());
    // The Start button: the user gesture that lets the page play the app's sound.
    await page.click('#action');
    await waitForSnapshot(page, 'the xterm on screen, input open', (s) => s.state === 'streaming' && s.inputReady);
    await until('a first frame shown', async () => (await page.evaluate('svcStream.meter.framesPresented') as number) > 0);
    const firstLine = (): Promise<number> => darkPixels(page, 0, 2, 320, 20);
    const blank = await firstLine();
    // Typed on the page's keyboard right after Start: the picture has the focus without a click.
    await page.keyboard.type('hi');
    const typed = await until('the typed keys on screen', async () => {
      const dark = await firstLine();
      return dark > blank + 30 ? dark : undefined;
    });

    // A double-click of the mouse on the page, on "hi": xterm selects the word and shows it reversed.
    const word = await onPage(page, 8, 10);
    await page.mouse.dblclick(word.x, word.y);
    await until('the selection highlight', async () => (await firstLine()) > typed + 100);

    const stats = await until('100 audio packets with sound in them', async () => {
      const s = await audioStats(page);
      return (s.packetsReceived ?? 0) >= 100 && (s.totalAudioEnergy ?? 0) > 0 ? s : undefined;
    });
    assert.equal(stats.codec?.toLowerCase(), 'audio/opus');
    t.diagnostic(`audio: ${stats.packetsReceived} packets, energy ${stats.totalAudioEnergy}`);

    // Enter, then Ctrl+D: cat reads end of input and exits, xterm with it, and the session with the app.
    await page.evaluate(END_OF_INPUT);
    await waitForSnapshot(page, 'the session to end', (s) => s.state === 'ended');
    assert.match(String(await page.evaluate('svcStream.ended')), /the application exited with code 0/);
    assert.equal(await page.textContent('#message'), 'The app ended the session.');
  });
});
