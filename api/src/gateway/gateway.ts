// The one listener. Routes by Host: api.<address> → main API, api-keys.<address> → key service; a
// bare loopback host (localhost:<port>) reaches the main API for local use; anything else is a 404
// problem naming the hosts served.
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { Problem, PROBLEM_CONTENT_TYPE } from '../http/problem.ts';
import { rejectUpgrade } from '../http/upgrade.ts';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer) => void;

export interface GatewayOptions {
  address: string;
  api: Handler;
  keys: Handler;
  /** WebSocket upgrades on the api host (agent links, streaming sessions). */
  apiUpgrade?: UpgradeHandler;
  tls?: { cert: string; key: string };
}

const loopbackHosts = new Set(['localhost', '127.0.0.1', '[::1]', '::1']);

export function hostnameOf(hostHeader: string | undefined): string {
  if (!hostHeader) return '';
  const host = hostHeader.toLowerCase();
  if (host.startsWith('[')) return host.slice(0, host.indexOf(']') + 1);
  const colon = host.lastIndexOf(':');
  return colon === -1 ? host : host.slice(0, colon);
}

export function createGateway(options: GatewayOptions) {
  const apiHost = `api.${options.address}`;
  const keysHost = `api-keys.${options.address}`;

  const isApiHost = (req: IncomingMessage) => {
    const host = hostnameOf(req.headers.host);
    return host === apiHost || loopbackHosts.has(host);
  };
  const unknownHost = (req: IncomingMessage) =>
    new Problem('not-found', `Unknown host '${hostnameOf(req.headers.host)}'; this gateway serves ${apiHost} and ${keysHost}`);

  function dispatch(req: IncomingMessage, res: ServerResponse) {
    if (isApiHost(req)) return options.api(req, res);
    if (hostnameOf(req.headers.host) === keysHost) return options.keys(req, res);
    const requestId = randomUUID();
    const problem = unknownHost(req);
    res.writeHead(404, { 'content-type': `${PROBLEM_CONTENT_TYPE}; charset=utf-8`, 'x-request-id': requestId });
    res.end(JSON.stringify(problem.toBody((req.url ?? '/').split('?')[0], requestId)));
  }

  const server = options.tls
    ? https.createServer({ cert: readFileSync(options.tls.cert), key: readFileSync(options.tls.key) }, dispatch)
    : http.createServer(dispatch);
  // Longer than common load balancers' idle timeouts, so they close first and never hit a dead socket.
  server.keepAliveTimeout = 65_000;
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    if (isApiHost(req) && options.apiUpgrade) return options.apiUpgrade(req, socket, head);
    rejectUpgrade(req, socket, isApiHost(req) ? new Problem('not-found', 'No WebSocket endpoint here') : unknownHost(req));
  });

  return {
    server,
    hosts: { api: apiHost, keys: keysHost },
    async listen(port: number, host: string): Promise<number> {
      await once(server.listen(port, host), 'listening');
      return (server.address() as AddressInfo).port;
    },
    close(): Promise<void> {
      return new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
