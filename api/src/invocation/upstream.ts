// Keep-alive HTTP/1.1 connections to one instance, for the hot path. The slots already cap how many
// requests an instance runs at once, so this pool never queues: a request takes an idle connection or
// opens one. Each request head is rendered once and written with its body in one write; the response
// is read by ResponseReader and handed on as it arrives.
import net from 'node:net';
import { ResponseReader, type ResponseEvents } from './response-reader.ts';

export interface UpstreamRequest {
  method: string;
  path: string;
  /** Header lines, each `name: value\r\n`, without host and content-length. */
  headerLines: string;
  body: Buffer;
}

export interface ResponseHandler extends ResponseEvents {
  end(): void;
  /** The exchange failed; `code` says how (ECONNREFUSED: it never reached the instance). */
  error(error: Error & { code?: string }): void;
}

/** An idle connection is dropped this long before the instance said it would close it. */
const IDLE_MARGIN_MS = 1_000;
const CONNECT_TIMEOUT_MS = 10_000;

class Timeout extends Error {
  readonly code: string;

  constructor(message: string, code: 'ECONNECTTIMEOUT' | 'ETIMEDOUT') {
    super(message);
    this.code = code;
  }
}

/** What the caller of one exchange holds: it ends the exchange, or lets a paused one read on. */
export interface ExchangeControl {
  abort(reason: Error): void;
  resume(): void;
}

/** One socket; one exchange on it at a time. */
class Connection {
  readonly socket: net.Socket;
  readonly #pool: UpstreamPool;
  #reader: ResponseReader | undefined;
  #handler: ResponseHandler | undefined;
  /** When an idle connection should no longer be used (ms, performance.now()). */
  usableUntil = Infinity;

  constructor(pool: UpstreamPool, host: string, port: number, idleTimeoutMs: number) {
    this.#pool = pool;
    this.socket = net.connect({ host, port, noDelay: true });
    this.socket.setTimeout(CONNECT_TIMEOUT_MS);
    this.socket.once('connect', () => this.socket.setTimeout(idleTimeoutMs));
    this.socket.on('timeout', () => this.#timedOut(idleTimeoutMs));
    this.socket.on('data', (chunk: Buffer) => this.#read(chunk));
    this.socket.on('end', () => this.#closed());
    this.socket.on('error', (error) => this.#fail(error));
    this.socket.on('close', () => this.#closed());
  }

  send(request: UpstreamRequest, head: string, handler: ResponseHandler): ExchangeControl {
    const reader = new ResponseReader(handler, request.method === 'HEAD');
    this.#handler = handler;
    this.#reader = reader;
    const headBytes = Buffer.byteLength(head, 'latin1');
    const bytes = Buffer.allocUnsafe(headBytes + request.body.length);
    bytes.write(head, 0, 'latin1');
    request.body.copy(bytes, headBytes);
    this.socket.write(bytes);
    // Bound to this exchange: a late call must not touch the next one on the same connection.
    return {
      abort: (reason) => {
        if (this.#reader === reader) this.#abort(reason);
      },
      resume: () => {
        if (this.#reader !== reader) return;
        reader.resumed();
        this.socket.resume();
      },
    };
  }

  /** The exchange ends before its response did: the connection cannot be reused. */
  #abort(reason: Error) {
    this.#fail(reason);
    this.socket.destroy();
  }

  #timedOut(idleTimeoutMs: number) {
    if (this.socket.connecting) this.#abort(new Timeout('connecting to the instance timed out', 'ECONNECTTIMEOUT'));
    else if (this.#handler) this.#abort(new Timeout(`the instance sent nothing for ${idleTimeoutMs / 1000} s`, 'ETIMEDOUT'));
    else this.socket.destroy();
  }

  #read(chunk: Buffer) {
    const reader = this.#reader;
    if (!reader) return void this.socket.destroy();
    let complete: boolean;
    try {
      complete = reader.push(chunk);
    } catch (error) {
      this.#abort(error as Error);
      return;
    }
    if (this.#reader !== reader) return; // aborted while its body was handed on
    if (complete) this.#complete(reader);
    else if (reader.paused) this.socket.pause();
  }

  #complete(reader: ResponseReader) {
    const handler = this.#handler!;
    this.#handler = undefined;
    this.#reader = undefined;
    // Reused only after this turn of the loop: an instance that closes an idle connection sends its FIN
    // right behind a late response, and a request written there in between would be lost.
    if (reader.reusable) setImmediate(() => this.#pool.idle(this, reader.idleTimeoutMs));
    else this.socket.destroy();
    handler.end();
  }

  #closed() {
    const reader = this.#reader;
    if (reader?.ended()) this.#complete(reader);
    else this.#fail(Object.assign(new Error('the instance closed the connection'), { code: 'ECONNRESET' }));
    this.#pool.gone(this);
    this.socket.destroy();
  }

  #fail(error: Error) {
    const handler = this.#handler;
    this.#handler = undefined;
    this.#reader = undefined;
    handler?.error(error);
  }
}

/** The connections to one instance (`origin` http://host:port). */
export class UpstreamPool {
  readonly #host: string;
  readonly #port: number;
  /** The Host header: host:port, an IPv6 address in brackets. */
  readonly #authority: string;
  readonly #idleTimeoutMs: number;
  readonly #idle: Connection[] = [];
  readonly #all = new Set<Connection>();
  /** `idleTimeoutMs` also bounds a request that waits that long without a byte. */
  constructor(origin: string, idleTimeoutMs: number) {
    const url = new URL(origin);
    this.#host = url.hostname.replace(/^\[|\]$/g, '');
    this.#port = Number(url.port || 80);
    this.#authority = url.host;
    this.#idleTimeoutMs = idleTimeoutMs;
  }

  /** Sends `request`; `handler` hears the response. */
  dispatch(request: UpstreamRequest, handler: ResponseHandler): ExchangeControl {
    return this.#take().send(request, this.#headOf(request), handler);
  }

  idle(connection: Connection, idleTimeoutMs: number | undefined) {
    if (!this.#all.has(connection)) return;
    connection.usableUntil = idleTimeoutMs === undefined ? Infinity : performance.now() + idleTimeoutMs - IDLE_MARGIN_MS;
    this.#idle.push(connection);
  }

  gone(connection: Connection) {
    this.#all.delete(connection);
    const at = this.#idle.indexOf(connection);
    if (at >= 0) this.#idle.splice(at, 1);
  }

  close() {
    for (const connection of this.#all) connection.socket.destroy();
    this.#all.clear();
    this.#idle.length = 0;
  }

  #take(): Connection {
    const now = performance.now();
    for (let connection = this.#idle.pop(); connection; connection = this.#idle.pop()) {
      if (connection.usableUntil > now) return connection;
      connection.socket.destroy();
    }
    const connection = new Connection(this, this.#host, this.#port, this.#idleTimeoutMs);
    this.#all.add(connection);
    return connection;
  }

  #headOf(request: UpstreamRequest): string {
    const { method, path, headerLines, body } = request;
    const length = body.length > 0 || !(method === 'GET' || method === 'HEAD') ? `content-length: ${body.length}\r\n` : '';
    return `${method} ${path} HTTP/1.1\r\nhost: ${this.#authority}\r\n${headerLines}${length}\r\n`;
  }
}
