// The result keeper: the agent's relay for requests that several API replicas send to this node's
// instances (docs/scale-out.md, "Results outlive their replica"). A replica sends each request here, not
// to the instance; the keeper passes it on and streams the answer back, holding the answer's bytes until
// it ends. When the replica's connection closes first (the replica died, or its client left), the keeper
// asks the control plane whether the request was answered 202 and so has a record to finish: if so it
// reads the answer to its end and reports it over the link (`kept`), to be stored as the request's result;
// if not, it ends the exchange with the instance, as the replica's own connection would have.
// Only replicas may use it: a request carries an HMAC, under this node's keeper key (sent in the welcome),
// of its instance and request ids. The instance is the one this agent runs under that id, never an
// address the request names.
import { createHmac, timingSafeEqual } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { forbidden, Problem, PROBLEM_CONTENT_TYPE } from '../domain/problem.ts';
import type { Logger } from '../logger.ts';
import type { Endpoint } from './protocol.ts';

/** Request headers the keeper reads and does not pass on; the response header that says the instance was never reached. */
export const KEEPER_HEADERS = { instance: 'svc-keeper-instance', token: 'svc-keeper-token', unreachable: 'svc-keeper-unreachable' } as const;
/** The most a kept answer may hold: it goes over the agent link in one message (base64, under the link's 16 MiB). */
export const MAX_KEPT_BYTES = 8 * 1024 * 1024;
/** Answer bytes held at once over every exchange: past it an answer is relayed but not kept. */
const MAX_HELD_BYTES = 256 * 1024 * 1024;
/** How long an answer sent to a replica stays here in case the replica dies before it has stored it. */
const REMEMBER_MS = 3_000;
/** How long an orphaned exchange waits for the control plane to say whether to keep it (not for its answer). */
const VERDICT_TIMEOUT_MS = 30_000;
/** Connect failures: the request never reached the instance, so the replica may send it to another. */
const NOT_STARTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH']);
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'upgrade'];

/** The token a replica sends for one request to one instance of the node whose keeper key is `key`. */
export function keeperToken(key: string, instanceId: string, requestId: string): string {
  return createHmac('sha256', key).update(instanceId).update('\n').update(requestId).digest('base64url');
}

/** A kept answer, or why there is none (the control plane ends the request 502 with it). */
export interface KeptResult {
  requestId: string;
  answer?: { status: number; headers: Record<string, string | string[]>; body: Buffer };
  error?: string;
}

/** What the keeper tells the control plane, over the link. `kept` is false when the link is down (it is sent again on the next). */
export interface KeeperLink {
  orphaned(requestId: string): void;
  kept(result: KeptResult): boolean;
}

/** One exchange whose replica went away, waiting for the verdict (`timer`: dropped without one). */
interface Orphan {
  exchange: Exchange;
  timer: NodeJS.Timeout;
}

export class ResultKeeper {
  readonly #endpointOf: (instanceId: string) => Endpoint | undefined;
  readonly #log: Logger;
  readonly #verdictTimeoutMs: number;
  readonly #server = http.createServer((req, res) => this.#relay(req, res));
  readonly #upstream = new http.Agent({ keepAlive: true });
  readonly #orphans = new Map<string, Orphan>();
  /** Exchanges whose answers went on each replica connection in the last REMEMBER_MS. */
  readonly #recent = new WeakMap<Socket, Set<Exchange>>();
  readonly #held = new HeldBytes(MAX_HELD_BYTES);
  /** Kept answers the link could not carry yet. */
  #unsent: KeptResult[] = [];
  #key: string | undefined;
  #link: KeeperLink | undefined;
  #closed = false;

  constructor(options: { endpointOf(instanceId: string): Endpoint | undefined; log: Logger; verdictTimeoutMs?: number }) {
    this.#endpointOf = options.endpointOf;
    this.#verdictTimeoutMs = options.verdictTimeoutMs ?? VERDICT_TIMEOUT_MS;
    this.#log = options.log.child({ component: 'keeper' });
  }

  /** Listens on `host`; the origin replicas reach it at. */
  async listen(host: string, port: number): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(port, host, () => resolve());
    });
    const address = this.#server.address() as AddressInfo;
    return `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`;
  }

  /** Welcomed: the node's key (none: no replica may use the keeper) and where to report; unsent answers go now. */
  linked(key: string | undefined, link: KeeperLink) {
    this.#key = key;
    this.#link = link;
    const unsent = this.#unsent;
    this.#unsent = [];
    for (const result of unsent) this.#report(result);
  }

  /** The control plane's answer about an orphaned exchange. */
  verdict(requestId: string, keep: boolean) {
    const orphan = this.#orphans.get(requestId);
    if (!orphan) return;
    clearTimeout(orphan.timer);
    // Kept, the answer may take as long as the request runs.
    if (keep) orphan.exchange.whenDone((result) => this.#done(requestId, orphan, result));
    else this.#drop(requestId, orphan);
  }

  /** Requests whose answers are kept here, for the hello: a record kept by this node and not named is lost. */
  keeping(): string[] {
    return [...this.#orphans.keys(), ...this.#unsent.map((result) => result.requestId)];
  }

  async close() {
    this.#closed = true;
    for (const [requestId, orphan] of this.#orphans) this.#drop(requestId, orphan);
    this.#upstream.destroy();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #authorized(req: IncomingMessage): { instanceId: string; requestId: string } | undefined {
    const instanceId = req.headers[KEEPER_HEADERS.instance];
    const requestId = req.headers['svc-reqid'];
    const token = req.headers[KEEPER_HEADERS.token];
    if (!this.#key || typeof instanceId !== 'string' || typeof requestId !== 'string' || typeof token !== 'string') return undefined;
    const given = Buffer.from(token);
    const expected = Buffer.from(keeperToken(this.#key, instanceId, requestId));
    return given.length === expected.length && timingSafeEqual(given, expected) ? { instanceId, requestId } : undefined;
  }

  #relay(req: IncomingMessage, res: ServerResponse) {
    const ids = this.#authorized(req);
    if (!ids) return refuse(req, res, forbidden('This port takes requests from the platform\'s API replicas only'));
    const endpoint = this.#endpointOf(ids.instanceId);
    if (!endpoint) return refuse(req, res, new Problem('bad-gateway', 'No such instance runs on this node'), true);
    const headers = { ...req.headers };
    for (const name of [KEEPER_HEADERS.instance, KEEPER_HEADERS.token, 'host', ...HOP_BY_HOP]) delete headers[name];
    const upstream = http.request({
      host: endpoint.host, port: endpoint.ports.inference, method: req.method, path: req.url, headers, agent: this.#upstream,
    });
    const limit = Number(req.headers['svc-max-response-size-bytes']) || MAX_KEPT_BYTES;
    const exchange = new Exchange(ids.requestId, res, upstream, limit, this.#held);
    req.pipe(upstream);
    req.on('close', () => {
      if (!req.complete) upstream.destroy(); // a request body cut short ends the exchange with the instance too
    });
    upstream.on('response', (answer) => exchange.answered(answer));
    upstream.on('error', (error: Error & { code?: string }) => exchange.failed(error));
    res.on('close', () => {
      if (!res.writableFinished && !exchange.over) this.#orphan(exchange);
    });
    exchange.whenDone((result) => {
      if (result.answer && !res.destroyed) this.#remember(req.socket, exchange);
      else if (!this.#orphans.has(exchange.requestId)) exchange.release();
    });
  }

  /**
   * An answer the replica was sent stays here a moment: a replica that dies having read it but before it
   * stored it closes this connection, and the answer is offered as if the replica had gone mid-answer.
   */
  #remember(socket: Socket, exchange: Exchange) {
    let recent = this.#recent.get(socket);
    if (!recent) {
      const exchanges = recent = new Set<Exchange>();
      this.#recent.set(socket, exchanges);
      socket.once('close', () => {
        for (const one of exchanges) this.#orphan(one);
      });
    }
    recent.add(exchange);
    setTimeout(() => {
      recent.delete(exchange);
      if (!this.#orphans.has(exchange.requestId)) exchange.release();
    }, REMEMBER_MS).unref();
  }

  /** The replica went away before it had the answer safe: keep it if the control plane says so. */
  #orphan(exchange: Exchange) {
    const { requestId } = exchange;
    if (!this.#link || this.#closed || this.#orphans.has(requestId)) return exchange.abort();
    const orphan: Orphan = { exchange, timer: setTimeout(() => this.#drop(requestId, orphan), this.#verdictTimeoutMs).unref() };
    this.#orphans.set(requestId, orphan);
    this.#log.info({ reqId: requestId }, 'the API replica sending a request went away; asking whether to keep its answer');
    this.#link.orphaned(requestId);
  }

  #done(requestId: string, orphan: Orphan, result: KeptResult) {
    this.#orphans.delete(requestId);
    orphan.exchange.release();
    this.#report(result);
  }

  #drop(requestId: string, orphan: Orphan) {
    clearTimeout(orphan.timer);
    this.#orphans.delete(requestId);
    orphan.exchange.abort();
    orphan.exchange.release();
  }

  #report(result: KeptResult) {
    if (this.#link?.kept(result)) this.#log.info({ reqId: result.requestId, status: result.answer?.status, error: result.error }, 'kept an answer whose API replica went away');
    else this.#unsent.push(result);
  }
}

/** One request through the keeper: the answer goes to the replica while it is there, and is held to its end. */
class Exchange {
  readonly requestId: string;
  readonly #res: ServerResponse;
  readonly #upstream: http.ClientRequest;
  readonly #limit: number;
  readonly #held: HeldBytes;
  #status = 502;
  #headers: Record<string, string | string[]> = {};
  #chunks: Buffer[] | undefined = [];
  /** Bytes of the answer held, counted in #held until released. */
  #size = 0;
  #result: KeptResult | undefined;
  readonly #onDone: ((result: KeptResult) => void)[] = [];
  over = false;

  constructor(requestId: string, res: ServerResponse, upstream: http.ClientRequest, limit: number, held: HeldBytes) {
    this.requestId = requestId;
    this.#res = res;
    this.#upstream = upstream;
    this.#limit = Math.min(limit, MAX_KEPT_BYTES);
    this.#held = held;
  }

  answered(answer: IncomingMessage) {
    this.#status = answer.statusCode ?? 502;
    const headers = { ...answer.headers } as Record<string, string | string[]>;
    for (const name of HOP_BY_HOP) delete headers[name];
    this.#headers = headers;
    if (!this.#res.destroyed) this.#res.writeHead(this.#status, headers);
    answer.on('data', (chunk: Buffer) => {
      this.#hold(chunk);
      if (this.#res.destroyed || this.#res.write(chunk)) return;
      answer.pause();
      const resume = () => {
        this.#res.off('drain', resume).off('close', resume);
        answer.resume();
      };
      this.#res.on('drain', resume).on('close', resume);
    });
    answer.on('end', () => {
      this.#res.end();
      const body = this.#chunks && Buffer.concat(this.#chunks);
      this.#chunks = undefined;
      this.#finish(body
        ? { requestId: this.requestId, answer: { status: this.#status, headers: this.#headers, body } }
        : { requestId: this.requestId, error: `The answer was larger than a node keeps (${this.#limit} bytes, and what it holds for other requests) for a request whose API replica stopped` });
    });
    answer.on('error', (error) => this.failed(error));
  }

  failed(error: Error & { code?: string }) {
    if (this.over) return;
    if (!this.#res.headersSent && !this.#res.destroyed) {
      refuse(undefined, this.#res, new Problem('bad-gateway', 'The instance could not be reached'), NOT_STARTED.has(error.code ?? ''));
    } else {
      this.#res.destroy();
    }
    this.#finish({ requestId: this.requestId, error: 'The instance ended while running the request; it was not retried' });
  }

  /** `done` gets the answer once it has ended (at once if it has). */
  whenDone(done: (result: KeptResult) => void) {
    if (this.#result) done(this.#result);
    else this.#onDone.push(done);
  }

  /** Ends the exchange with the instance, unless it is over (its connection may serve another request by then). */
  abort() {
    if (!this.over) this.#upstream.destroy();
  }

  /** The held answer is reported, dropped or safe with its replica: its bytes count no more. */
  release() {
    this.#held.give(this.#size);
    this.#size = 0;
  }

  #hold(chunk: Buffer) {
    if (!this.#chunks) return;
    if (this.#size + chunk.length <= this.#limit && this.#held.take(chunk.length)) {
      this.#size += chunk.length;
      this.#chunks.push(chunk);
      return;
    }
    this.#chunks = undefined;
    this.release();
    // Past the limit an answer can no longer be kept: once its replica has gone, there is no one to read it.
    if (this.#res.destroyed) this.abort();
  }

  #finish(result: KeptResult) {
    if (this.over) return;
    this.over = true;
    this.#result = result;
    for (const done of this.#onDone) done(result);
  }
}

function refuse(req: IncomingMessage | undefined, res: ServerResponse, problem: Problem, unreachable = false) {
  req?.resume();
  const requestId = String(req?.headers['svc-reqid'] ?? '');
  res.writeHead(problem.status, { 'content-type': PROBLEM_CONTENT_TYPE, ...(unreachable ? { [KEEPER_HEADERS.unreachable]: '1' } : {}) });
  res.end(JSON.stringify(problem.toBody(req?.url ?? '', requestId)));
}

/** Bytes counted against a ceiling. */
class HeldBytes {
  #free: number;

  constructor(max: number) {
    this.#free = max;
  }

  take(bytes: number): boolean {
    if (bytes > this.#free) return false;
    this.#free -= bytes;
    return true;
  }

  give(bytes: number) {
    this.#free += bytes;
  }
}
