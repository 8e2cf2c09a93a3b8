// Reads one HTTP/1.1 response off a connection as its bytes arrive (RFC 9112): the head, then the body
// framed by content-length, chunked coding or the connection's end. The body is handed on as it comes,
// so an event stream or a large result never sits here whole.

/** What the reader tells about the response it reads. */
export interface ResponseEvents {
  head(status: number, headers: Record<string, string | string[]>): void;
  /** False asks the connection to pause until the body's consumer drains. */
  data(chunk: Buffer): boolean;
}

class ProtocolError extends Error {
  readonly code = 'EPROTO';
}

const MAX_HEAD_BYTES = 64 * 1024;
const HEAD_END = Buffer.from('\r\n\r\n');
const CRLF = 0x0a;

type Framing = 'none' | 'length' | 'chunked' | 'close';
type ChunkStep = 'size' | 'data' | 'data-end' | 'trailer';

/** A chunk-size line: hex digits, then optional extensions. */
const CHUNK_SIZE = /^[0-9a-fA-F]{1,12}\s*(?:;.*)?$/;
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: |\r|$)/;
/** A header name is a token (RFC 9110 5.6.2): no space, no separator; as llhttp, anything else is refused. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * The status line and header lines of a response head, names lower-cased, repeated names as arrays. Lines
 * are found with indexOf rather than split: this runs once per response on the hot path.
 */
function parseHead(text: string): { status: number; keepAlive: boolean; headers: Record<string, string | string[]> } {
  const statusLine = STATUS_LINE.exec(text);
  if (!statusLine) throw new ProtocolError('the instance answered something that is not an HTTP/1.x status line');
  const headers: Record<string, string | string[]> = {};
  const firstBreak = text.indexOf('\r\n');
  for (let at = firstBreak < 0 ? text.length : firstBreak + 2; at < text.length;) {
    let end = text.indexOf('\r\n', at);
    if (end < 0) end = text.length;
    const colon = text.indexOf(':', at);
    if (colon <= at || colon > end) throw new ProtocolError('the instance answered a malformed header line');
    const name = text.slice(at, colon);
    if (!TOKEN.test(name)) throw new ProtocolError('the instance answered a header name that is not a token');
    const value = text.slice(colon + 1, end).trim();
    const key = name.toLowerCase();
    const seen = headers[key];
    if (seen === undefined) headers[key] = value;
    else if (Array.isArray(seen)) seen.push(value);
    else headers[key] = [seen, value];
    at = end + 2;
  }
  const connection = headers.connection === undefined ? '' : String(headers.connection).toLowerCase();
  const keepAlive = statusLine[1] === '1' ? !connection.includes('close') : connection.includes('keep-alive');
  return { status: Number(statusLine[2]), keepAlive, headers };
}

/**
 * One response at a time: `push` each chunk the connection reads; it answers true once the response is
 * whole. A connection that may carry another request after it has `reusable` true.
 */
export class ResponseReader {
  readonly #events: ResponseEvents;
  readonly #bodyless: boolean;
  #head: Buffer | undefined;
  #started = false;
  #framing: Framing = 'none';
  /** Body bytes still due (content-length), or of the current chunk. */
  #remaining = 0;
  #chunkStep: ChunkStep = 'size';
  #line = '';
  #paused = false;
  reusable = false;
  /** How long the instance keeps an idle connection open (keep-alive: timeout=N), in ms, if it said. */
  idleTimeoutMs: number | undefined;

  /** `bodyless`: the request was HEAD, so no answer has a body. */
  constructor(events: ResponseEvents, bodyless: boolean) {
    this.#events = events;
    this.#bodyless = bodyless;
  }

  /** True when the consumer asked to pause (the caller pauses the socket). */
  get paused(): boolean {
    return this.#paused;
  }

  resumed() {
    this.#paused = false;
  }

  /** Feeds bytes read from the connection; true once the response is complete. Throws ProtocolError. */
  push(chunk: Buffer): boolean {
    if (!this.#started) return this.#pushHead(chunk);
    if (this.#framing === 'length') return this.#pushLength(chunk);
    if (this.#framing === 'chunked') return this.#pushChunked(chunk);
    if (this.#framing === 'close') this.#data(chunk);
    else if (chunk.length) throw new ProtocolError('the instance sent bytes after its response');
    return this.#framing === 'none';
  }

  /** The connection ended: true when that completes the response (a body read to the end). */
  ended(): boolean {
    return this.#started && this.#framing === 'close';
  }

  #pushHead(chunk: Buffer): boolean {
    const bytes = this.#head ? Buffer.concat([this.#head, chunk]) : chunk;
    const end = bytes.indexOf(HEAD_END);
    if (end < 0) {
      if (bytes.length > MAX_HEAD_BYTES) throw new ProtocolError('the instance answered a response head over 64 KiB');
      this.#head = bytes;
      return false;
    }
    this.#head = undefined;
    const { status, keepAlive, headers } = parseHead(bytes.toString('latin1', 0, end));
    const rest = bytes.subarray(end + HEAD_END.length);
    // Informational answers (100 Continue, 103 Early Hints) precede the real one.
    if (status < 200) return rest.length ? this.#pushHead(rest) : false;
    this.#frame(status, keepAlive, headers);
    this.#events.head(status, headers);
    return this.push(rest);
  }

  #frame(status: number, keepAlive: boolean, headers: Record<string, string | string[]>) {
    this.#started = true;
    this.reusable = keepAlive;
    const timeout = headers['keep-alive'] === undefined ? null : /timeout=(\d+)/.exec(String(headers['keep-alive']));
    if (timeout) this.idleTimeoutMs = Number(timeout[1]) * 1000;
    const coding = headers['transfer-encoding'];
    const length = headers['content-length'];
    if (this.#bodyless || status === 204 || status === 304) this.#framing = 'none';
    else if (coding !== undefined) {
      if (!/(^|,)\s*chunked\s*$/i.test(String(coding))) throw new ProtocolError('the instance answered a transfer coding other than chunked');
      // Both framings at once is how responses are smuggled; llhttp refuses it too.
      if (length !== undefined) throw new ProtocolError('the instance answered both content-length and transfer-encoding');
      this.#framing = 'chunked';
    } else if (length !== undefined) {
      if (Array.isArray(length) || !/^\d+$/.test(length)) throw new ProtocolError('the instance answered an invalid content-length');
      this.#framing = 'length';
      this.#remaining = Number(length);
    } else {
      this.#framing = 'close';
      this.reusable = false;
    }
  }

  #pushLength(chunk: Buffer): boolean {
    if (chunk.length > this.#remaining) throw new ProtocolError('the instance sent more than its content-length');
    this.#remaining -= chunk.length;
    if (chunk.length) this.#data(chunk);
    return this.#remaining === 0;
  }

  #pushChunked(chunk: Buffer): boolean {
    let at = 0;
    while (at < chunk.length) {
      if (this.#chunkStep === 'data') {
        const take = Math.min(this.#remaining, chunk.length - at);
        this.#data(chunk.subarray(at, at + take));
        at += take;
        this.#remaining -= take;
        if (this.#remaining === 0) this.#chunkStep = 'data-end';
        continue;
      }
      const newline = chunk.indexOf(CRLF, at);
      if (newline < 0) {
        this.#takeLine(chunk.toString('latin1', at));
        return false;
      }
      const line = this.#takeLine(chunk.toString('latin1', at, newline), true);
      at = newline + 1;
      if (line !== undefined && this.#afterLine(line)) {
        if (at < chunk.length) throw new ProtocolError('the instance sent bytes after its response');
        return true;
      }
    }
    return false;
  }

  /** Collects a line that may span reads; the whole line (without CR) once `complete`. */
  #takeLine(part: string, complete = false): string | undefined {
    this.#line += part;
    if (this.#line.length > 8192) throw new ProtocolError('the instance sent a chunk line over 8 KiB');
    if (!complete) return undefined;
    if (!this.#line.endsWith('\r')) throw new ProtocolError('the instance ended a chunk line with a bare LF (CRLF is required)');
    const line = this.#line.slice(0, -1);
    this.#line = '';
    return line;
  }

  /** A whole line of the chunked coding; true when it ends the body. */
  #afterLine(line: string): boolean {
    if (this.#chunkStep === 'data-end') {
      if (line !== '') throw new ProtocolError('the instance sent a chunk longer than its size');
      this.#chunkStep = 'size';
      return false;
    }
    if (this.#chunkStep === 'trailer') return line === '';
    if (!CHUNK_SIZE.test(line)) throw new ProtocolError('the instance sent an invalid chunk size');
    this.#remaining = parseInt(line, 16); // stops at the first character that is not a hex digit
    this.#chunkStep = this.#remaining === 0 ? 'trailer' : 'data';
    return false;
  }

  #data(chunk: Buffer) {
    if (!this.#events.data(chunk)) this.#paused = true;
  }
}
