// Splits ffmpeg's Ogg output into Opus packets (RFC 7845). Ogg is used only as framing, one page per
// packet (-page_duration), so a packet is handed on the moment its page is complete; the two header
// packets (OpusHead, OpusTags) are skipped.
const PAGE_HEADER_BYTES = 27;

export class OggOpusReader {
  #pending: Buffer = Buffer.alloc(0);
  #packet: Buffer[] = [];
  #packetsSeen = 0;
  readonly #onPacket: (packet: Buffer) => void;

  constructor(onPacket: (packet: Buffer) => void) {
    this.#onPacket = onPacket;
  }

  push(chunk: Buffer): void {
    let buf = this.#pending.length ? Buffer.concat([this.#pending, chunk]) : chunk;
    let offset = 0;
    while (buf.length - offset >= PAGE_HEADER_BYTES) {
      if (buf.toString('latin1', offset, offset + 4) !== 'OggS') throw new Error('audio encoder output is not Ogg');
      const segments = buf[offset + 26];
      const tableEnd = offset + PAGE_HEADER_BYTES + segments;
      if (buf.length < tableEnd) break;
      let bodyBytes = 0;
      for (let i = 0; i < segments; i++) bodyBytes += buf[offset + PAGE_HEADER_BYTES + i];
      if (buf.length < tableEnd + bodyBytes) break;
      // Lacing: a packet is the run of segments up to one shorter than 255 bytes.
      let at = tableEnd;
      for (let i = 0; i < segments; i++) {
        const size = buf[offset + PAGE_HEADER_BYTES + i];
        this.#packet.push(buf.subarray(at, at + size));
        at += size;
        if (size < 255) this.#emit();
      }
      offset = tableEnd + bodyBytes;
    }
    this.#pending = offset === buf.length ? Buffer.alloc(0) : Buffer.from(buf.subarray(offset));
  }

  #emit(): void {
    const packet = Buffer.concat(this.#packet);
    this.#packet = [];
    if (this.#packetsSeen++ < 2) return; // OpusHead, OpusTags
    this.#onPacket(packet);
  }
}
