// Splits ffmpeg's FLV output into H.264 access units. FLV is used only as framing: every tag carries its
// own length, so a frame is handed on the moment its last byte arrives, never one frame late (a raw
// Annex-B stream would only reveal the end of a frame when the next one starts).
import { parseAvcDecoderConfigurationRecord } from 'werift';

export type H264AccessUnit = {
  /** Length-prefixed (AVCC) NAL units, parameter sets prepended on keyframes. */
  data: Buffer;
  keyframe: boolean;
};

const FLV_HEADER_BYTES = 9 + 4; // header + PreviousTagSize0
const TAG_HEADER_BYTES = 11;
const TAG_VIDEO = 9;
const AVC_CODEC_ID = 7;
const AVC_SEQUENCE_HEADER = 0;
const AVC_NALU = 1;

export class FlvReader {
  #pending: Buffer = Buffer.alloc(0);
  #headerSkipped = false;
  /** SPS and PPS as 4-byte length-prefixed NAL units, from the AVC sequence header tag. */
  #parameterSets: Buffer | undefined;
  readonly #onAccessUnit: (unit: H264AccessUnit) => void;

  constructor(onAccessUnit: (unit: H264AccessUnit) => void) {
    this.#onAccessUnit = onAccessUnit;
  }

  push(chunk: Buffer): void {
    let buf = this.#pending.length ? Buffer.concat([this.#pending, chunk]) : chunk;
    if (!this.#headerSkipped) {
      if (buf.length < FLV_HEADER_BYTES) { this.#pending = buf; return; }
      if (buf.toString('latin1', 0, 3) !== 'FLV') throw new Error('encoder output is not FLV');
      buf = buf.subarray(FLV_HEADER_BYTES);
      this.#headerSkipped = true;
    }
    let offset = 0;
    while (buf.length - offset >= TAG_HEADER_BYTES) {
      const type = buf[offset] & 0x1f;
      const size = buf.readUIntBE(offset + 1, 3);
      const end = offset + TAG_HEADER_BYTES + size + 4;
      if (buf.length < end) break;
      if (type === TAG_VIDEO) this.#videoTag(buf.subarray(offset + TAG_HEADER_BYTES, offset + TAG_HEADER_BYTES + size));
      offset = end;
    }
    this.#pending = offset === buf.length ? Buffer.alloc(0) : buf.subarray(offset);
  }

  #videoTag(body: Buffer): void {
    if (body.length < 5 || (body[0] & 0x0f) !== AVC_CODEC_ID) return;
    const keyframe = body[0] >> 4 === 1;
    const packetType = body[1];
    if (packetType === AVC_SEQUENCE_HEADER) {
      const record = parseAvcDecoderConfigurationRecord(body.subarray(5));
      if (record.naluLengthSize !== 4) throw new Error(`unsupported AVC NAL length size ${record.naluLengthSize}`);
      this.#parameterSets = Buffer.concat(record.parameterSets.flatMap((nal) => {
        const length = Buffer.alloc(4);
        length.writeUInt32BE(nal.length);
        return [length, nal];
      }));
      return;
    }
    if (packetType !== AVC_NALU) return;
    const nalus = body.subarray(5);
    if (nalus.length === 0) return;
    // The encoder writes SPS/PPS only once (FLV has a global header); a receiver that joins or recovers
    // at this keyframe needs them in-band, so they go in front of every keyframe.
    const data = keyframe && this.#parameterSets ? Buffer.concat([this.#parameterSets, nalus]) : nalus;
    this.#onAccessUnit({ data, keyframe });
  }
}
