// The streaming proxy: one listener for browsers. WebSocket upgrades (any path) and other HTTP
// requests are authenticated, rewritten and forwarded to the platform with http-proxy-3; /client/
// serves the browser client; preflights are answered here. Every response carries the CORS headers.
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ProxyServer } from 'http-proxy-3';
import { createAuthorizer, type AuthorizedUser } from './auth.ts';
import { CLIENT_PREFIX, createClientFiles } from './client-files.ts';
import type { ProxyConfig } from './config.ts';
import { alignSetCookies, type CookiePolicy } from './cookies.ts';
import { answerPreflight, applyCors, CORS_HEADERS, isPreflight } from './cors.ts';
import { inspectRequest, rewriteForUpstream } from './forwarding.ts';
import { Keepalive } from './keepalive.ts';
import { listenTls } from './listen-tls.ts';
import type { Logger } from './logger.ts';
import { pathOf, Problem, sendProblem, sendProblemOnSocket } from './problem.ts';
import { Relay } from './relay.ts';
import { selectedSubprotocol } from './subprotocols.ts';
import { createUpstream } from './upstream.ts';

export interface StreamingProxy {
  server: http.Server | https.Server;
  /** Resolves with the bound port (useful with PROXY_PORT=0). */
  listen(): Promise<number>;
  close(): Promise<void>;
  /** Open WebSocket tunnels. */
  readonly tunnels: number;
}

interface Exchange {
  requestId: string;
  pathname: string;
  /** Sec-WebSocket-Protocol items the browser offered, before the proxy consumed its own. */
  offered: string[];
  user: AuthorizedUser;
  startedAt: number;
  /** Set once the platform has upgraded: its session id (start only) and the time it took. */
  session?: string;
  setupMs?: number;
}

const SESSION_ID_HEADER = 'svc-reqid';

export async function createStreamingProxy(config: ProxyConfig, logger: Logger): Promise<StreamingProxy> {
  const upstream = createUpstream(config);
  const proxy = new ProxyServer(upstream.proxyOptions);
  const authorizer = createAuthorizer(config.auth, config.functionId);
  const clientFiles = config.clientDir ? createClientFiles(config.clientDir) : undefined;
  const tlsMaterial = await listenTls(config.listen);
  const cookiePolicy: CookiePolicy = { secure: tlsMaterial !== undefined, domain: config.cookies.domain, path: config.cookies.path };
  const exchanges = new WeakMap<IncomingMessage, Exchange>();
  /** Upgraded platform sockets waiting for http-proxy-3's `open`, with their browser socket. */
  const handshakes = new WeakMap<Socket, { browser: Socket; exchange: Exchange }>();
  const relays = new Set<Relay>();
  const keepalive = new Keepalive(config.timeouts, (relay, side) => {
    logger.info({ side }, `${side} silent for its whole timeout; tunnel dropped`);
  });

  // Responses from the platform: CORS, and its cookies moved to the proxy's site.
  function alignResponseHeaders(headers: IncomingHttpHeaders): void {
    applyCors(headers);
    if (headers['set-cookie']) {
      const aligned = alignSetCookies(headers['set-cookie'], cookiePolicy);
      if (aligned.length > 0) headers['set-cookie'] = aligned;
      else delete headers['set-cookie'];
    }
  }

  // The platform must answer within the server timeout (reference: `timeout server 7s`).
  const timeoutError = () => Object.assign(new Error('the platform did not answer in time'), { code: 'ETIMEDOUT' });
  proxy.on('proxyReq', (proxyReq) => {
    proxyReq.setTimeout(config.timeouts.serverMs, () => proxyReq.destroy(timeoutError()));
  });

  proxy.on('proxyRes', (proxyRes) => {
    upstream.replenish();
    alignResponseHeaders(proxyRes.headers);
  });

  proxy.on('proxyReqWs', (proxyReq, req, socket) => {
    const exchange = exchanges.get(req);
    if (!exchange) return;
    proxyReq.setTimeout(config.timeouts.serverMs, () => proxyReq.destroy(timeoutError()));
    // These listeners run before http-proxy-3's own, which copy proxyRes.headers verbatim to the
    // browser, on the 101 as on a refusal.
    proxyReq.on('response', (proxyRes) => {
      upstream.replenish();
      alignResponseHeaders(proxyRes.headers);
      logger.info({ requestId: exchange.requestId, path: exchange.pathname, status: proxyRes.statusCode }, 'platform refused the upgrade');
    });
    proxyReq.on('upgrade', (proxyRes, proxySocket: Socket) => {
      proxyReq.setTimeout(0);
      // After the 101 is relayed (this listener runs first), so the spare's handshake does not delay it.
      setImmediate(upstream.replenish);
      alignResponseHeaders(proxyRes.headers);
      const selected = selectedSubprotocol(proxyRes.headers['sec-websocket-protocol'], exchange.offered);
      if (selected) proxyRes.headers['sec-websocket-protocol'] = selected;
      const sessionId = proxyRes.headers[SESSION_ID_HEADER];
      // The session id resumes a session, so only its start is logged.
      exchange.session = typeof sessionId === 'string' ? `${sessionId.slice(0, 8)}…` : undefined;
      exchange.setupMs = Date.now() - exchange.startedAt;
      handshakes.set(proxySocket, { browser: socket as Socket, exchange });
    });
  });

  proxy.on('open', (proxySocket: Socket) => {
    const handshake = handshakes.get(proxySocket);
    if (!handshake) return;
    handshakes.delete(proxySocket);
    const relay = new Relay(handshake.browser, proxySocket);
    relay.start();
    relays.add(relay);
    keepalive.watch(relay);
    const { exchange } = handshake;
    logger.debug({ requestId: exchange.requestId, path: exchange.pathname, tokenSource: exchange.user.source, session: exchange.session }, 'tunnel open');
    // One info line per tunnel, when it ends, with everything worth knowing about it.
    handshake.browser.once('close', () => {
      relays.delete(relay);
      logger.info({
        requestId: exchange.requestId,
        path: exchange.pathname,
        user: exchange.user.subject,
        tokenSource: exchange.user.source,
        session: exchange.session,
        setupMs: exchange.setupMs,
        durationMs: Date.now() - relay.openedAt,
        bytesFromBrowser: handshake.browser.bytesRead,
        bytesFromPlatform: proxySocket.bytesRead,
      }, 'tunnel closed');
    });
  });

  // Errors reaching http-proxy-3 without a per-request callback; each call below passes one.
  proxy.on('error', (error) => logger.warn({ error: errorSummary(error) }, 'proxy error'));

  function upstreamProblem(error: Error, requestId: string): Problem {
    const code = (error as NodeJS.ErrnoException).code ?? '';
    logger.warn({ requestId, error: errorSummary(error) }, 'platform request failed');
    if (code === 'ECONNECT_TIMEOUT' || code === 'ETIMEDOUT') {
      return new Problem('gateway-timeout', 'the platform did not answer in time');
    }
    if (/CERT|SELF_SIGNED|UNABLE_TO_|ALTNAME|ERR_TLS/.test(code)) {
      return new Problem('bad-gateway', 'the platform\'s TLS certificate could not be verified');
    }
    return new Problem('bad-gateway', 'the platform could not be reached');
  }

  function failure(error: unknown, requestId: string): Problem {
    if (error instanceof Problem) return error;
    logger.error({ requestId, error: errorSummary(error) }, 'unexpected failure');
    return new Problem('internal', 'the proxy failed to handle the request');
  }

  async function onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const requestId = randomUUID();
    const url = req.url;
    const pathname = pathOf(url);
    try {
      if (isPreflight(req)) return answerPreflight(res);
      if (clientFiles?.handles(pathname)) return await clientFiles.serve(req, res, pathname);
      if (clientFiles && pathname === '/' && (req.method === 'GET' || req.method === 'HEAD')) {
        res.writeHead(302, { ...CORS_HEADERS, location: CLIENT_PREFIX, 'content-length': '0' });
        res.end();
        return;
      }
      const inspected = inspectRequest(req);
      const user = await authorizer.authorize(inspected.token);
      const headers = rewriteForUpstream(req, inspected, config);
      logger.debug({ requestId, method: req.method, path: pathname, user: user.subject }, 'forwarding request');
      proxy.web(req, res, { headers }, (error) => sendProblem(res, upstreamProblem(error, requestId), url, requestId));
    } catch (error) {
      const problem = failure(error, requestId);
      if (problem.status < 500) logger.info({ requestId, path: pathname, status: problem.status }, problem.message);
      sendProblem(res, problem, url, requestId);
    }
  }

  async function onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const requestId = randomUUID();
    const url = req.url;
    const pathname = pathOf(url);
    const startedAt = Date.now();
    socket.on('error', (error) => logger.debug({ requestId, error: errorSummary(error) }, 'browser socket error'));
    try {
      if (req.headers.upgrade?.toLowerCase() !== 'websocket') throw new Problem('bad-request', 'only WebSocket upgrades are forwarded');
      const inspected = inspectRequest(req);
      const user = await authorizer.authorize(inspected.token);
      const headers = rewriteForUpstream(req, inspected, config);
      exchanges.set(req, { requestId, pathname, offered: inspected.subprotocols, user, startedAt });
      proxy.ws(req, socket, head, { headers }, (error) => sendProblemOnSocket(socket, upstreamProblem(error, requestId), url, requestId));
    } catch (error) {
      const problem = failure(error, requestId);
      if (problem.status < 500) logger.info({ requestId, path: pathname, status: problem.status }, problem.message);
      sendProblemOnSocket(socket, problem, url, requestId);
    }
  }

  const serverOptions: http.ServerOptions = {
    // Reference: `timeout http-request 30m` to receive a request, `timeout client 7s` for an idle
    // browser connection. No socket idle timeout while a request is served: waiting for the platform
    // is bounded by the server timeout and ends in a 504, not in a cut connection.
    requestTimeout: config.timeouts.httpRequestMs,
    headersTimeout: config.timeouts.httpRequestMs,
    keepAliveTimeout: config.timeouts.clientMs,
    noDelay: true,
  };
  const handler = (req: IncomingMessage, res: ServerResponse) => void onRequest(req, res);
  const server = tlsMaterial
    ? https.createServer({ ...serverOptions, ...tlsMaterial }, handler)
    : http.createServer(serverOptions, handler);
  server.timeout = 0;
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => void onUpgrade(req, socket, head));
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    const requestId = randomUUID();
    const problem = error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? new Problem('request-timeout', 'the request was not received in time')
      : new Problem('bad-request', 'malformed HTTP request');
    if ((socket as Socket).writable && !(error.code === 'ECONNRESET')) sendProblemOnSocket(socket, problem, undefined, requestId);
    else socket.destroy();
  });

  return {
    server,
    get tunnels() {
      return relays.size;
    },
    async listen() {
      await once(server.listen(config.listen.port, config.listen.host), 'listening');
      return (server.address() as AddressInfo).port;
    },
    close() {
      keepalive.stop();
      // Tunnels end as lost connections: the platform keeps their sessions for a resume elsewhere.
      for (const relay of relays) relay.abort();
      upstream.close();
      return new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

function errorSummary(error: unknown): { code?: string; message: string } {
  if (error instanceof Error) return { code: (error as NodeJS.ErrnoException).code, message: error.message };
  return { message: String(error) };
}
