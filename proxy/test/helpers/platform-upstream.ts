// A stand-in for the platform gateway's streaming contract, over real TLS with a test CA:
// - WebSocket upgrade on Host `api.<address>` (any path; path and query are recorded), answering
//   401 (bearer key), 404 (function, or unknown session) as application/problem+json before the upgrade;
// - the function from `svc-function-id` / `function-id` headers;
// - each new session gets a UUID, sent on the 101 as `svc-reqid` and the cookie `svc-request-id`
//   (Domain = the platform host); sending either back resumes the session; an unknown one is a 404
//   that clears the cookie;
// - after the upgrade: one JSON message {type:'session',sessionId,resumed,path}, then every frame echoed.
// Plain HTTP requests get a JSON echo of what arrived, with a cookie.
// The same interface can later be backed by the real platform (see `PlatformUnderTest`).
import { randomUUID } from 'node:crypto';
import https from 'node:https';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { createTestCa, issueServerCertificate, type TestCa } from './pki.ts';

export const API_KEY = 'svcapikey-test-0123456789abcdef';
export const FUNCTION_ID = '6f1b9a52-1d7e-4c55-9d4f-0a4f64d9c001';
export const FUNCTION_VERSION_ID = 'c3e0f9a1-8b4d-4f1e-9a3e-5b6c7d8e9f00';
export const GATEWAY_ADDRESS = 'localhost';

export interface ReceivedUpgrade {
  url: string;
  headers: IncomingHttpHeaders;
  /** Which TLS connection (1, 2, … in order of establishment) carried the request. */
  connection?: number;
}

export interface PlatformUnderTest {
  /** SVC_SERVER for the proxy. */
  server: string;
  /** SVC_SERVER_HOST for the proxy. */
  host: string;
  /** The CA that signed the platform's certificate, for SVC_CA_FILE. */
  ca: TestCa;
  apiKey: string;
  functionId: string;
}

export interface FakePlatform extends PlatformUnderTest {
  port: number;
  /** Every upgrade request as it arrived, in order. */
  upgrades: ReceivedUpgrade[];
  /** Every plain HTTP request as it arrived. */
  requests: ReceivedUpgrade[];
  /** Open WebSocket connections, and how those that ended were closed (1006: no close frame). */
  readonly open: number;
  closes: number[];
  /** TLS connections established so far. */
  readonly connections: number;
  /** WebSocket pings received (the proxy's keepalive towards the platform). */
  readonly pings: number;
  close(): Promise<void>;
}

export async function startFakePlatform(options: { ca?: TestCa; address?: string } = {}): Promise<FakePlatform> {
  const address = options.address ?? GATEWAY_ADDRESS;
  const apiHost = `api.${address}`;
  const ca = options.ca ?? await createTestCa();
  const certificate = await issueServerCertificate(ca, [apiHost, 'localhost']);
  const sessions = new Set<string>();
  const upgrades: ReceivedUpgrade[] = [];
  const requests: ReceivedUpgrade[] = [];
  const closes: number[] = [];
  const sockets = new Set<WebSocket>();
  let pings = 0;
  const connectionIds = new WeakMap<object, number>();
  let connections = 0;

  const server = https.createServer({ cert: certificate.cert, key: certificate.key }, (req, res) => {
    requests.push({ url: req.url ?? '/', headers: req.headers });
    const body = JSON.stringify({ url: req.url, headers: req.headers });
    res.writeHead(200, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      'set-cookie': `svc-request-id=${randomUUID()}; Domain=${apiHost}; Path=/v2; Secure; HttpOnly; SameSite=Strict`,
    });
    res.end(body);
  });
  server.on('secureConnection', (socket) => connectionIds.set(socket, ++connections));
  const wss = new WebSocketServer({ noServer: true, handleProtocols: (offered) => offered.has('svc-echo') ? 'svc-echo' : false });
  const sessionOf = new WeakMap<IncomingMessage, { id: string; resumed: boolean }>();

  wss.on('headers', (headers, req) => {
    const session = sessionOf.get(req);
    if (!session) return;
    headers.push(`Set-Cookie: svc-request-id=${session.id}; Domain=${apiHost}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=300`);
    headers.push(`svc-reqid: ${session.id}`);
  });

  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    upgrades.push({ url: req.url ?? '/', headers: { ...req.headers }, connection: connectionIds.get(req.socket) });
    const host = (req.headers.host ?? '').replace(/:\d+$/, '');
    if (host !== apiHost) return refuse(socket, 404, `unknown host ${host}`);
    if (req.headers.authorization !== `Bearer ${API_KEY}`) return refuse(socket, 401, 'invalid bearer credential');
    const functionId = req.headers['svc-function-id'] ?? req.headers['function-id'];
    if (functionId !== FUNCTION_ID) return refuse(socket, 404, 'unknown function');
    const resumeId = req.headers['svc-reqid'] ?? cookieValue(req.headers.cookie, 'svc-request-id');
    if (typeof resumeId === 'string' && !sessions.has(resumeId)) {
      return refuse(socket, 404, 'unknown or expired session', [`set-cookie: svc-request-id=; Domain=${apiHost}; Path=/; Max-Age=0; Secure; HttpOnly`]);
    }
    const session = typeof resumeId === 'string' ? { id: resumeId, resumed: true } : { id: randomUUID(), resumed: false };
    sessions.add(session.id);
    sessionOf.set(req, session);
    wss.handleUpgrade(req, socket, head, (ws) => {
      sockets.add(ws);
      ws.on('close', (code) => {
        sockets.delete(ws);
        closes.push(code);
      });
      ws.send(JSON.stringify({ type: 'session', sessionId: session.id, resumed: session.resumed, path: req.url }));
      ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
      ws.on('ping', () => { pings++; });
    });
  });

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    server: `https://127.0.0.1:${port}`,
    host: apiHost,
    ca,
    apiKey: API_KEY,
    functionId: FUNCTION_ID,
    port,
    upgrades,
    requests,
    closes,
    get open() {
      return sockets.size;
    },
    get pings() {
      return pings;
    },
    get connections() {
      return connections;
    },
    close: () => new Promise((resolve) => {
      for (const ws of sockets) ws.terminate();
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return value.join('=');
  }
  return undefined;
}

function refuse(socket: Duplex, status: number, detail: string, extraHeaders: string[] = []): void {
  const body = JSON.stringify({ type: `urn:svc:problem-details:${status}`, title: 'refused', status, detail, instance: '/', requestId: randomUUID() });
  (socket as Socket).end([
    `HTTP/1.1 ${status} Refused`,
    'content-type: application/problem+json',
    `content-length: ${Buffer.byteLength(body)}`,
    ...extraHeaders,
    'connection: close',
    '',
    body,
  ].join('\r\n'));
}
