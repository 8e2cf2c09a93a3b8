// The signaling server on STREAMING_SERVER_PORT: a WebSocket at STREAMING_START_ENDPOINT (any query
// string accepted, the platform forwards it untouched) speaking the JSON protocol of
// docs/streaming-protocol.md. The same HTTP listener can serve the browser client under /client/ for
// development and tests; in production the platform's proxy serves those files.
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import type { ServerMessage } from '../client/protocol.ts';
import { CloseCode } from '../client/protocol.ts';
import type { ClientFiles } from './client-files.ts';
import { notFound } from './http-problem.ts';
import type { Logger } from './logger.ts';
import { parseClientMessage } from './protocol.ts';
import type { SignalingChannel, StreamingSession } from './session.ts';

/** A connection must say hello this soon after opening: a silent one holds the container from the next person. */
const HELLO_TIMEOUT_MS = 3000;
/** Silence for this many keepalive intervals means the connection is dead (proxies drop idle ones). */
const MISSED_KEEPALIVES = 3;
const MAX_MESSAGE_BYTES = 128 * 1024;

export type SignalingServerOptions = {
  session: StreamingSession;
  startEndpoint: string;
  keepaliveMs: number;
  log: Logger;
  clientFiles?: ClientFiles;
};

export type SignalingServer = {
  server: Server;
  listen(port: number, host?: string): Promise<number>;
  close(): Promise<void>;
};

let nextConnectionId = 1;

export function createSignalingServer(options: SignalingServerOptions): SignalingServer {
  const { session, log } = options;
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES, perMessageDeflate: false });

  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (options.clientFiles && (req.method === 'GET' || req.method === 'HEAD') && options.clientFiles.handles(path)) {
      options.clientFiles.serve(req, res, path);
      return;
    }
    notFound(req, res);
  });

  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== options.startEndpoint) {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => accept(ws, req));
  });

  function accept(ws: WebSocket, req: IncomingMessage): void {
    const id = nextConnectionId++;
    const connLog = log.child({ connection: id });
    let greeted = false;
    let lastHeard = performance.now();
    const channel: SignalingChannel = {
      id,
      send(message: ServerMessage) {
        if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(message));
      },
      close(code: number, reason: string) {
        if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close(code, reason);
      },
    };
    connLog.info({ remote: req.socket.remoteAddress, forwardedFor: req.headers['x-forwarded-for'] }, 'signaling connection opened');
    if (!session.admit(channel)) return;

    const helloTimer = setTimeout(() => { if (!greeted) channel.close(CloseCode.protocolError, 'expected hello'); }, HELLO_TIMEOUT_MS);
    // The client pings every keepaliveMs; a connection silent for several intervals is cut here, which
    // the session treats like any other drop (resume window).
    const watchdog = setInterval(() => {
      if (performance.now() - lastHeard > options.keepaliveMs * MISSED_KEEPALIVES) {
        connLog.info('keepalive missed, closing connection');
        ws.close(CloseCode.keepaliveTimeout, 'keepalive timeout');
        // A half-open TCP connection never completes the closing handshake; do not wait for it.
        setTimeout(() => ws.terminate(), 1000).unref();
        clearInterval(watchdog);
      }
    }, options.keepaliveMs);

    ws.on('message', (data: RawData, isBinary: boolean) => {
      lastHeard = performance.now();
      if (isBinary) {
        channel.close(CloseCode.protocolError, 'binary messages are not part of the protocol');
        return;
      }
      const parsed = parseClientMessage(data.toString());
      if (!parsed.ok) {
        connLog.info({ error: parsed.error }, 'bad signaling message');
        channel.close(CloseCode.protocolError, `bad message: ${parsed.error}`.slice(0, 120));
        return;
      }
      const message = parsed.value;
      if (!greeted) {
        if (message.type !== 'hello') {
          channel.close(CloseCode.protocolError, 'expected hello first');
          return;
        }
        greeted = true;
        clearTimeout(helloTimer);
        session.hello(channel, message);
        return;
      }
      session.message(channel, message);
    });
    ws.on('close', (code: number, reason: Buffer) => {
      clearTimeout(helloTimer);
      clearInterval(watchdog);
      connLog.info({ code, reason: reason.toString() }, 'signaling connection closed');
      if (greeted) session.closed(channel, `close ${code}`);
    });
    ws.on('error', (error: Error) => connLog.info({ err: error }, 'signaling connection error'));
  }

  return {
    server,
    listen: async (port, host) => {
      await once(server.listen(port, host), 'listening');
      return (server.address() as AddressInfo).port;
    },
    close: () => new Promise((resolve) => {
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
