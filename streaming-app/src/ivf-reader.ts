// Splits ffmpeg's IVF output into VP8 frames. Like FLV for H.264, IVF is only framing: a 12-byte header
// with the frame length precedes each frame, so a frame is forwarded as soon as it is complete.
export type Vp8Frame = { data: Buffer; keyframe: boolean };

const IVF_FILE_HEADER_BYTES = 32;
const IVF_FRAME_HEADER_BYTES = 12;

export class IvfReader {
  #pending: Buffer = Buffer.alloc(0);
  #headerSkipped = false;
  readonly #onFrame: (frame: Vp8Frame) => void;

  constructor(onFrame: (frame: Vp8Frame) => void) {
    this.#onFrame = onFrame;
  }

  push(chunk: Buffer): void {
    let buf = this.#pending.length ? Buffer.concat([this.#pending, chunk]) : chunk;
    if (!this.#headerSkipped) {
      if (buf.length < IVF_FILE_HEADER_BYTES) { this.#pending = buf; return; }
      if (buf.toString('latin1', 0, 4) !== 'DKIF') throw new Error('encoder output is not IVF');
      buf = buf.subarray(buf.readUInt16LE(6));
      this.#headerSkipped = true;
    }
    let offset = 0;
    while (buf.length - offset >= IVF_FRAME_HEADER_BYTES) {
      const size = buf.readUInt32LE(offset);
      const end = offset + IVF_FRAME_HEADER_BYTES + size;
      if (buf.length < end) break;
      const data = buf.subarray(offset + IVF_FRAME_HEADER_BYTES, end);
      // VP8 frame tag, bit 0: 0 = key frame (RFC 6386 §9.1).
      if (data.length > 0) this.#onFrame({ data, keyframe: (data[0] & 1) === 0 });
      offset = end;
    }
    this.#pending = offset === buf.length ? Buffer.alloc(0) : buf.subarray(offset);
  }
}
