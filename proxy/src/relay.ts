// The byte relay of an upgraded WebSocket. http-proxy-3 performs the handshake and would pipe the two
// sockets; the proxy takes the sockets over from that pipe so it can inject pings (keepalive.ts).
// A ping may only go between two frames, so each direction tracks where frames end. Only frame
// headers are read: payloads pass through untouched, masked or compressed, with no re-framing.
import type { Socket } from 'node:net';
import * as ws from 'ws';

// ws frames control messages for us; its Sender is exported but not in @types/ws.
type FrameOptions = { fin: boolean; opcode: number; mask: boolean; readOnly: boolean; rsv1: boolean };
const { Sender } = ws as unknown as { Sender: { frame(data: Buffer, options: FrameOptions): Buffer[] } };
const PING_OPCODE = 0x9;
const EMPTY = Buffer.alloc(0);

function pingFrame(masked: boolean): Buffer {
  // Frames towards the platform come from a client, and RFC 6455 requires clients to mask; the mask
  // key is fresh for every frame.
  return Buffer.concat(Sender.frame(EMPTY, { fin: true, opcode: PING_OPCODE, mask: masked, readOnly: false, rsv1: false }));
}
const PING_TO_BROWSER = pingFrame(false);

const LONGEST_HEADER = 14;

/** Total length (header and payload) of the frame starting at `start`, or undefined if its header is incomplete. */
function frameLength(buffer: Buffer, start: number, available: number): number | undefined {
  if (available < 2) return undefined;
  const second = buffer[start + 1];
  const lengthField = second & 0x7f;
  const maskLength = second & 0x80 ? 4 : 0;
  if (lengthField < 126) return 2 + maskLength + lengthField;
  if (lengthField === 126) return available < 4 ? undefined : 4 + maskLength + buffer.readUInt16BE(start + 2);
  if (available < 10) return undefined;
  return 10 + maskLength + buffer.readUInt32BE(start + 2) * 2 ** 32 + buffer.readUInt32BE(start + 6);
}

/** Follows one direction of a WebSocket byte stream and knows whether it stands between frames. */
export class FrameBoundary {
  /** Bytes of the current frame not seen yet. */
  #remaining = 0;
  /** A frame header split across chunks, gathered until its length is known. */
  #header: Buffer | undefined;
  #headerLength = 0;

  get atBoundary(): boolean {
    return this.#remaining === 0 && this.#headerLength === 0;
  }

  feed(chunk: Buffer): void {
    let offset = 0;
    while (offset < chunk.length) {
      if (this.#remaining > 0) {
        const take = Math.min(this.#remaining, chunk.length - offset);
        offset += take;
        this.#remaining -= take;
        continue;
      }
      if (this.#headerLength === 0) {
        const total = frameLength(chunk, offset, chunk.length - offset);
        if (total !== undefined) {
          this.#remaining = total;
          continue;
        }
      }
      // The header is split: gather up to a full header's worth and retry.
      this.#header ??= Buffer.alloc(LONGEST_HEADER);
      const copied = Math.min(LONGEST_HEADER - this.#headerLength, chunk.length - offset);
      chunk.copy(this.#header, this.#headerLength, offset, offset + copied);
      const total = frameLength(this.#header, 0, this.#headerLength + copied);
      if (total === undefined) {
        this.#headerLength += copied;
        offset += copied;
        continue;
      }
      // The frame began `headerLength` bytes before this chunk's `offset`.
      this.#remaining = total - this.#headerLength;
      this.#headerLength = 0;
    }
  }
}

export type RelaySide = 'browser' | 'platform';

export class Relay {
  readonly browser: Socket;
  readonly upstream: Socket;
  readonly openedAt = Date.now();
  /** Set by any byte from that side; the keepalive sweep reads and clears them. */
  heardFromBrowser = true;
  heardFromUpstream = true;
  browserSilentMs = 0;
  upstreamSilentMs = 0;
  #towardsUpstream = new FrameBoundary();
  #towardsBrowser = new FrameBoundary();

  constructor(browser: Socket, upstream: Socket) {
    this.browser = browser;
    this.upstream = upstream;
  }

  /** Takes both sockets over. Bytes already buffered (the handshake's trailing data) are kept. */
  start(): void {
    const { browser, upstream } = this;
    browser.unpipe();
    upstream.unpipe();
    browser.on('data', (chunk: Buffer) => {
      this.heardFromBrowser = true;
      this.#towardsUpstream.feed(chunk);
      if (!upstream.write(chunk)) {
        browser.pause();
        upstream.once('drain', () => browser.resume());
      }
    });
    upstream.on('data', (chunk: Buffer) => {
      this.heardFromUpstream = true;
      this.#towardsBrowser.feed(chunk);
      if (!browser.write(chunk)) {
        upstream.pause();
        browser.once('drain', () => upstream.resume());
      }
    });
    // A half close travels on; the kind of disconnection is what the platform bases session
    // lifetime on, so the proxy never turns one kind into another.
    browser.once('end', () => { if (!upstream.writableEnded) upstream.end(); });
    upstream.once('end', () => { if (!browser.writableEnded) browser.end(); });
    browser.resume();
    upstream.resume();
  }

  /** Sends a ping to the browser if the stream towards it is between frames. */
  pingBrowser(): boolean {
    if (!this.#towardsBrowser.atBoundary || this.browser.writableNeedDrain || !this.browser.writable) return false;
    this.browser.write(PING_TO_BROWSER);
    return true;
  }

  /** Sends a ping to the platform if the stream towards it is between frames. */
  pingUpstream(): boolean {
    if (!this.#towardsUpstream.atBoundary || this.upstream.writableNeedDrain || !this.upstream.writable) return false;
    this.upstream.write(pingFrame(true));
    return true;
  }

  /** Ends both sockets without a close frame: to the platform this is a lost connection, not a goodbye. */
  abort(): void {
    this.browser.destroy();
    this.upstream.destroy();
  }
}
