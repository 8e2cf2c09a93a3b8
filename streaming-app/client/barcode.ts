// The frame barcode: a strip of black/white cells at the top-left of every video frame, written by the
// app's renderer and read back by the browser client from decoded frames. It carries the frame number
// and the sequence number of the last input event the frame reflects, so the client can measure
// input-to-photon latency and count frames without any side channel. Shared by both sides (no DOM).

export const BARCODE_CELLS = 32;
export const BARCODE_ROWS = 2;
/** Luma of a 1 cell and of a 0 cell (video range); the reader thresholds halfway. */
export const LUMA_ONE = 235;
export const LUMA_ZERO = 16;

export type BarcodeLayout = { cellWidth: number; cellHeight: number; width: number; height: number };

export function barcodeLayout(videoWidth: number): BarcodeLayout {
  const cellWidth = Math.floor(videoWidth / BARCODE_CELLS);
  // Rows at least 8 pixels tall so that 4:2:0 subsampling and block artefacts leave cell centres clean.
  const half = Math.floor(cellWidth / 2);
  const cellHeight = Math.max(8, half + (half % 2));
  return { cellWidth, cellHeight, width: cellWidth * BARCODE_CELLS, height: cellHeight * BARCODE_ROWS };
}

/**
 * Where the barcode drawn for a `sourceWidth` picture is in a picture shown `shownWidth` wide: the sender
 * may send it scaled down (STREAMING_DEGRADATION), and the cells then scale with it.
 */
export function shownBarcodeLayout(sourceWidth: number, shownWidth: number): BarcodeLayout {
  const drawn = barcodeLayout(sourceWidth);
  const scale = shownWidth / sourceWidth;
  return { cellWidth: drawn.cellWidth * scale, cellHeight: drawn.cellHeight * scale, width: drawn.width * scale, height: drawn.height * scale };
}

/** CRC-8 (polynomial 0x07) over the frame number and input sequence, so a misread frame is discarded. */
export function barcodeChecksum(frameNumber: number, inputSeq: number): number {
  let crc = 0;
  const bytes = [frameNumber >>> 24, frameNumber >>> 16, frameNumber >>> 8, frameNumber, inputSeq >>> 16, inputSeq >>> 8, inputSeq];
  for (const value of bytes) {
    crc ^= value & 0xff;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x80 ? ((crc << 1) ^ 0x07) & 0xff : (crc << 1) & 0xff;
  }
  // The final XOR keeps an all-black strip (a blank or missing frame) from reading as a valid frame 0.
  return crc ^ 0x5a;
}

/**
 * Writes the 64 cell values (1 or 0), row-major, into `out`: row 0 is the 32-bit frame number, row 1 is
 * the 24-bit input sequence followed by the 8-bit checksum, most significant bit first.
 */
export function encodeBarcode(frameNumber: number, inputSeq: number, out: Uint8Array): void {
  const frame = frameNumber >>> 0;
  const seq = inputSeq & 0xffffff;
  const check = barcodeChecksum(frame, seq);
  for (let i = 0; i < 32; i++) out[i] = (frame >>> (31 - i)) & 1;
  for (let i = 0; i < 24; i++) out[32 + i] = (seq >>> (23 - i)) & 1;
  for (let i = 0; i < 8; i++) out[56 + i] = (check >>> (7 - i)) & 1;
}

/**
 * Reads the barcode back from 64 brightness samples (0-255, one per cell centre, row-major, taken at
 * `stride` apart in `samples`). Returns undefined when the checksum does not match.
 */
export function decodeBarcode(samples: ArrayLike<number>, stride = 1): { frameNumber: number; inputSeq: number } | undefined {
  const threshold = (LUMA_ONE + LUMA_ZERO) / 2;
  let frame = 0;
  let seq = 0;
  let check = 0;
  for (let i = 0; i < 32; i++) frame = (frame << 1) | (samples[i * stride] > threshold ? 1 : 0);
  for (let i = 0; i < 24; i++) seq = (seq << 1) | (samples[(32 + i) * stride] > threshold ? 1 : 0);
  for (let i = 0; i < 8; i++) check = (check << 1) | (samples[(56 + i) * stride] > threshold ? 1 : 0);
  frame >>>= 0;
  if (barcodeChecksum(frame, seq) !== check) return undefined;
  return { frameNumber: frame, inputSeq: seq };
}
