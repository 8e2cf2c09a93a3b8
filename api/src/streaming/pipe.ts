// The WebSocket between a browser (through the intermediary proxy) and its streaming container, byte for
// byte (http-proxy-3). The container sees its own sign-in path with the browser's query and the
// application's subprotocol items, never the platform's credentials. The 101 carries the session id
// (cookie `svc-request-id`, header `svc-reqid`); the two sockets live and die together, so an abrupt
// drop on one side reaches the other as one.
import type { ClientRequest, IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { createProxyServer } from 'http-proxy-3';
import { Problem } from '../domain/problem.ts';
import { rejectUpgrade } from '../http/upgrade.ts';
import type { Logger } from '../logger.ts';
import { applicationItems, SESSION_COOKIE, SESSION_HEADER } from './request.ts';

export interface PipeTarget {
  sessionId: string;
  /** The container's streaming server and its sign-in path. */
  host: string;
  port: number;
  path: string;
  /** Sec-WebSocket-Protocol items the browser offered. */
  items: string[];
  /** The container accepted: `client` is the browser's socket, piped from now on. */
  onOpen(client: Duplex): void;
  /** The container could not be reached (the browser has been answered 502). */
  onFailed(): void;
}

export const sessionCookie = (id: string) => `${SESSION_COOKIE}=${id}; Path=/; HttpOnly; SameSite=Lax`;
export const CLEAR_SESSION_COOKIE = `${SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax`;

export function createSessionPipe(log: Logger) {
  const proxy = createProxyServer({ xfwd: false, proxyTimeout: 0 });
  const targets = new WeakMap<IncomingMessage, PipeTarget>();

  // Runs before http-proxy-3 writes the container's 101 to the browser.
  proxy.on('proxyReqWs', (proxyReq: ClientRequest, req: IncomingMessage, client: Socket) => {
    const target = targets.get(req);
    if (!target) return;
    proxyReq.on('upgrade', (response: IncomingMessage, upstream: Socket) => {
      response.headers['set-cookie'] = [sessionCookie(target.sessionId)];
      response.headers[SESSION_HEADER] = target.sessionId;
      client.once('close', () => upstream.destroy());
      upstream.once('close', () => client.destroy());
      target.onOpen(client);
    });
  });
  proxy.on('error', (error: Error, req: IncomingMessage, socket: unknown) => {
    const target = targets.get(req);
    log.warn({ sessionId: target?.sessionId, err: error.message }, 'streaming instance unreachable');
    target?.onFailed();
    const duplex = socket as Duplex;
    if (duplex.writable && !duplex.destroyed) rejectUpgrade(req, duplex, new Problem('bad-gateway', 'The streaming instance did not accept the connection'));
  });

  return {
    connect(req: IncomingMessage, socket: Duplex, head: Buffer, target: PipeTarget): void {
      targets.set(req, target);
      // The container gets the browser's query as sent, less the session id, which is the platform's.
      const raw = req.url ?? '/';
      let query = raw.includes('?') ? raw.slice(raw.indexOf('?')) : '';
      const params = new URLSearchParams(query);
      if (params.has(SESSION_HEADER)) {
        params.delete(SESSION_HEADER);
        query = params.size ? `?${params}` : '';
      }
      req.url = target.path + query;
      delete req.headers.authorization;
      delete req.headers.cookie;
      // Browsers that offered subprotocols need one chosen; the function-id item carries no secret.
      const passed = applicationItems(target.items);
      const functionItem = target.items.find((item) => item.toLowerCase().startsWith('function-id.'));
      const offered = passed.length ? passed : functionItem ? [functionItem] : [];
      if (offered.length) req.headers['sec-websocket-protocol'] = offered.join(', ');
      else delete req.headers['sec-websocket-protocol'];
      proxy.ws(req, socket, head, { target: `http://${target.host}:${target.port}` });
    },

    close(): void {
      proxy.close();
    },
  };
}
