// The in-process encoder holds a frame's buffer until it has encoded it: node-av's Frame.fromBuffer wraps
// the buffer instead of copying it, so a buffer given back to the source earlier could be refilled with a
// later picture before the encoder read it (seen on a loaded machine as frames showing the picture of two
// frames later). Here the source refills each buffer the moment it gets it back.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { barcodeStamper } from '../src/frame-source.ts';
import { LibavVideoEncoder, loadNodeAv } from '../src/libav-encoder.ts';
import { createLogger } from '../src/logger.ts';
import type { EncodedFrame } from '../src/encoder.ts';
import { decodeFrames } from './helpers.ts';

const WIDTH = 320;
const HEIGHT = 180;
const available = await loadNodeAv();
const skip = 'error' in available ? `node-av did not load (${available.error}); npm ci installs it` : false;
if (skip) console.log(`# skipped: ${skip}`);

test('a frame buffer goes back to the source only after the encoder took its picture', { skip }, async () => {
  const encoded: EncodedFrame[] = [];
  const encoder = await LibavVideoEncoder.open(
    { encoder: 'libvpx', width: WIDTH, height: HEIGHT, fps: 30, bitrateKbps: 2000, keyframeIntervalFrames: 60, ffmpegPath: 'ffmpeg' },
    createLogger('silent'), (frame) => encoded.push(frame), (reason) => assert.fail(reason),
  );
  const stamp = barcodeStamper(WIDTH, HEIGHT);
  encoder.start();
  const buffer = Buffer.alloc((WIDTH * HEIGHT * 3) / 2, 128);
  for (let frameNumber = 1; frameNumber <= 5; frameNumber++) {
    stamp(buffer, frameNumber, 0);
    // The source at its fastest: the buffer given back is filled with another frame at once.
    const given = new Promise<void>((resolve) => {
      assert.equal(encoder.submit(buffer, frameNumber, performance.now(), () => { stamp(buffer, 1000 + frameNumber, 0); resolve(); }), true);
    });
    await given;
  }
  const deadline = Date.now() + 20_000;
  while (encoded.length < 5 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  encoder.stop();
  const decoded = await decodeFrames(encoded.map((frame) => frame.data), 'video/vp8', WIDTH, HEIGHT);
  assert.deepEqual(decoded.map((frame) => frame.frameNumber), [1, 2, 3, 4, 5]);
});
