// A zip archive of one file, written as the file's bytes arrive: stored (not compressed), with its CRC and
// sizes in a data descriptor after the data, so nothing is held back. The shape of the reference's large
// results: <requestId>.response inside an application/zip. Zip32: the file stays under 4 GiB.
import { crc32 } from 'node:zlib';

const LOCAL_HEADER = 0x04034b50;
const DATA_DESCRIPTOR = 0x08074b50;
const CENTRAL_HEADER = 0x02014b50;
const END_OF_CENTRAL_DIRECTORY = 0x06054b50;
/** Bit 3: sizes and CRC follow the data; bit 11: the name is UTF-8. */
const FLAGS = 0x0808;
const VERSION = 20;

/** MS-DOS time and date, the zip format's timestamps. */
function dosTime(at: Date): { time: number; date: number } {
  return {
    time: (at.getHours() << 11) | (at.getMinutes() << 5) | Math.floor(at.getSeconds() / 2),
    date: ((at.getFullYear() - 1980) << 9) | ((at.getMonth() + 1) << 5) | at.getDate(),
  };
}

export class ZipOfOne {
  readonly #name: Buffer;
  readonly #at: { time: number; date: number };
  #crc = 0;
  #size = 0;

  constructor(name: string, at = new Date()) {
    this.#name = Buffer.from(name, 'utf8');
    this.#at = dosTime(at);
  }

  /** The local file header: the archive's first bytes. */
  start(): Buffer {
    const header = Buffer.alloc(30);
    header.writeUInt32LE(LOCAL_HEADER, 0);
    this.#common(header, 4);
    header.writeUInt16LE(this.#name.length, 26);
    return Buffer.concat([header, this.#name]);
  }

  /** A chunk of the file, counted into the CRC and size; returned as it is written. */
  data(chunk: Buffer): Buffer {
    this.#crc = crc32(chunk, this.#crc);
    this.#size += chunk.length;
    return chunk;
  }

  /** The data descriptor, central directory and end record: the archive's last bytes. */
  end(): Buffer {
    const descriptor = Buffer.alloc(16);
    descriptor.writeUInt32LE(DATA_DESCRIPTOR, 0);
    this.#sizes(descriptor, 4);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(CENTRAL_HEADER, 0);
    central.writeUInt16LE(VERSION, 4);
    this.#common(central, 6);
    this.#sizes(central, 16);
    central.writeUInt16LE(this.#name.length, 28);
    const end = Buffer.alloc(22);
    end.writeUInt32LE(END_OF_CENTRAL_DIRECTORY, 0);
    end.writeUInt16LE(1, 8);
    end.writeUInt16LE(1, 10);
    end.writeUInt32LE(central.length + this.#name.length, 12);
    end.writeUInt32LE(30 + this.#name.length + this.#size + descriptor.length, 16);
    return Buffer.concat([descriptor, central, this.#name, end]);
  }

  /** Version needed, flags, method (stored), time and date; CRC and sizes stay 0 (they follow the data). */
  #common(buffer: Buffer, at: number) {
    buffer.writeUInt16LE(VERSION, at);
    buffer.writeUInt16LE(FLAGS, at + 2);
    buffer.writeUInt16LE(0, at + 4);
    buffer.writeUInt16LE(this.#at.time, at + 6);
    buffer.writeUInt16LE(this.#at.date, at + 8);
  }

  #sizes(buffer: Buffer, at: number) {
    buffer.writeUInt32LE(this.#crc, at);
    buffer.writeUInt32LE(this.#size, at + 4);
    buffer.writeUInt32LE(this.#size, at + 8);
  }
}
