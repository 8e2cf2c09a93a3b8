// The frame barcode and the scene that draws it: what the renderer writes, a reader gets back.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { barcodeLayout, decodeBarcode, encodeBarcode, LUMA_ONE, LUMA_ZERO } from '../client/barcode.ts';
import { Scene } from '../src/scene.ts';

function readStrip(frame: Buffer, width: number): ReturnType<typeof decodeBarcode> {
  const layout = barcodeLayout(width);
  const samples: number[] = [];
  for (let i = 0; i < 64; i++) {
    const x = (i % 32) * layout.cellWidth + (layout.cellWidth >> 1);
    const y = Math.floor(i / 32) * layout.cellHeight + (layout.cellHeight >> 1);
    samples.push(frame[y * width + x]);
  }
  return decodeBarcode(samples);
}

test('barcode round trip for edge values', () => {
  const bits = new Uint8Array(64);
  for (const [frame, seq] of [[1, 0], [0xffffffff, 0xffffff], [123456789, 4242], [2 ** 31, 1]]) {
    encodeBarcode(frame, seq, bits);
    const samples = Array.from(bits, (b) => (b ? LUMA_ONE : LUMA_ZERO));
    assert.deepEqual(decodeBarcode(samples), { frameNumber: frame >>> 0, inputSeq: seq });
  }
});

test('a corrupted cell or an all-black strip does not decode', () => {
  const bits = new Uint8Array(64);
  encodeBarcode(777, 12, bits);
  const samples = Array.from(bits, (b) => (b ? LUMA_ONE : LUMA_ZERO));
  samples[5] = samples[5] === LUMA_ONE ? LUMA_ZERO : LUMA_ONE;
  assert.equal(decodeBarcode(samples), undefined);
  assert.equal(decodeBarcode(new Array(64).fill(LUMA_ZERO)), undefined);
});

test('the scene stamps frame number and the newest input into the picture', () => {
  for (const [width, height] of [[320, 180], [1280, 720]]) {
    const scene = new Scene(width, height);
    const frame = Buffer.alloc(scene.frameBytes);
    assert.equal(scene.frameBytes, width * height * 1.5);
    scene.render(frame, 5, 0);
    assert.deepEqual(readStrip(frame, width), { frameNumber: 5, inputSeq: 0 });
    scene.apply({ kind: 'pointer', seq: 9, x: 1, y: 1 });
    scene.apply({ kind: 'pointer', seq: 8, x: 0, y: 0 }); // late, older event: position applies, seq stays 9
    scene.render(frame, 6, 16);
    assert.deepEqual(readStrip(frame, width), { frameNumber: 6, inputSeq: 9 });
  }
});

test('the pointer moves the marker and a key changes its colour', () => {
  const scene = new Scene(320, 180);
  const frame = Buffer.alloc(scene.frameBytes);
  const lumaAt = (x: number, y: number) => frame[y * 320 + x];
  const top = barcodeLayout(320).height;
  scene.apply({ kind: 'pointer', seq: 1, x: 0, y: 0 });
  scene.render(frame, 1, 0);
  const background = lumaAt(160, 90);
  const markerLuma = lumaAt(2, top + 2);
  assert.notEqual(markerLuma, background, 'marker drawn at top-left, just below the barcode');
  scene.apply({ kind: 'pointer', seq: 2, x: 1, y: 0 });
  scene.render(frame, 2, 0);
  assert.equal(lumaAt(2, top + 2), background, 'marker left the top-left corner');
  assert.equal(lumaAt(317, top + 2), markerLuma, 'marker now at top-right');
  scene.apply({ kind: 'key', seq: 3, key: '2' });
  scene.render(frame, 3, 0);
  assert.notEqual(lumaAt(317, top + 2), markerLuma, 'key 2 picked another colour');
});
