// The pipe source: an off-screen renderer (pipe-renderer.ts) writes raw I420 frames to the container's
// socket; they stream like any other source (a PLI is answered with a keyframe from the warm spare), and
// input events reach the renderer as JSON lines. A bad input event (malformed, or clipboard text over the
// size cap) is dropped and counted without harming the session.
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { CLIPBOARD_MAX_BYTES } from '../client/protocol.ts';
import { decodeFrames, FFMPEG, missingTools, startApp, WeriftViewer } from './helpers.ts';

const RENDERER = fileURLToPath(new URL('./pipe-renderer.ts', import.meta.url));

describe('pipe source', { skip: missingTools([FFMPEG]) }, () => {
  test('frames from a renderer stream and decode; a PLI brings a keyframe; input reaches it; bad input is dropped and counted', async (t) => {
    const app = await startApp({
      STREAMING_SOURCE: 'pipe', STREAMING_APP_COMMAND: `exec '${process.execPath}' '${RENDERER}'`, STREAMING_VIDEO_FPS: '30',
      STREAMING_FRAME_BARCODE: 'true', STREAMING_AUDIO: 'false',
    });
    t.after(() => app.stop());
    assert.ok(app.logs.some((l) => l.msg === 'first frame received from the application'), 'ready only after a first frame');
    const viewer = new WeriftViewer(app.signalingUrl());
    t.after(() => viewer.close());
    await viewer.hello();
    await viewer.waitForFrames(30);
    const decoded = await decodeFrames(viewer.frames.slice(0, 30), viewer.codec ?? '', 320, 180);
    const numbered = decoded.filter((f) => f.frameNumber > 0);
    assert.ok(numbered.length >= 25, `${numbered.length} of 30 frames carry a readable barcode`);
    for (let i = 1; i < numbered.length; i++) assert.ok(numbered[i].frameNumber > numbered[i - 1].frameNumber);

    const keyframes = viewer.keyframes;
    await viewer.sendPli();
    await app.waitForLog((l) => (l.msg === 'encoder switched for keyframe' || l.msg === 'keyframe requested') && l.reason === 'pli');
    const deadline = Date.now() + 10_000;
    while (viewer.keyframes === keyframes && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.ok(viewer.keyframes > keyframes, 'a picture loss indication is answered with a keyframe (warm spare)');

    const channel = await viewer.channelOpen;
    channel.send(JSON.stringify({ type: 'key', seq: 5, t: 0, key: 'a', code: 'KeyA', down: true, mods: 0 }));
    channel.send(JSON.stringify({ type: 'key', seq: 6, t: 0, key: 'a', code: 'Key A!', down: false }));
    channel.send('not json');
    channel.send(JSON.stringify({ type: 'clipboard', seq: 8, t: 0, text: 'x'.repeat(CLIPBOARD_MAX_BYTES + 1) }));
    channel.send(JSON.stringify({ type: 'wheel', seq: 7, t: 0, dx: 0, dy: 120 }));
    await app.waitForLog((l) => l.msg === 'app output' && String(l.line).includes('"type":"wheel"'));
    const forwarded = app.logs.filter((l) => l.msg === 'app output').map((l) => String(l.line));
    assert.ok(forwarded.some((line) => line.includes('"seq":5') && line.includes('"code":"KeyA"')), 'the key event reached the renderer');
    assert.ok(!forwarded.some((line) => line.includes('"seq":6') || line.includes('"seq":8')), 'the malformed and the oversized event did not');
    const dropped = await app.waitForLog((l) => l.msg === 'input event dropped');
    assert.match(String(dropped.error), /code/);

    viewer.signaling.send({ type: 'bye', reason: 'test done' });
    assert.deepEqual(await app.exited, { code: 0, signal: null });
    const ended = app.logs.find((l) => l.msg === 'session ended');
    assert.equal(ended?.inputDropped, 3, 'every bad event was counted');
  });
});
