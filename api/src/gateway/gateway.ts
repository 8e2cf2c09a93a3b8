// The one listener. Routes by Host: api.<address> → main API, api-keys.<address> → key service; a
// bare loopback host (localhost:<port>) reaches the main API for local use; anything else is a 404
// problem naming the hosts served.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { Problem, PROBLEM_CONTENT_TYPE } from '../http/problem.ts';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

export interface GatewayOptions {
  address: string;
  api: Handler;
  keys: Handler;
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

  function dispatch(req: IncomingMessage, res: ServerResponse) {
    const host = hostnameOf(req.headers.host);
    if (host === apiHost || loopbackHosts.has(host)) return options.api(req, res);
    if (host === keysHost) return options.keys(req, res);
    const requestId = randomUUID();
    const problem = new Problem('not-found', `Unknown host '${host}'; this gateway serves ${apiHost} and ${keysHost}`);
    res.writeHead(404, { 'content-type': `${PROBLEM_CONTENT_TYPE}; charset=utf-8`, 'x-request-id': requestId });
    res.end(JSON.stringify(problem.toBody((req.url ?? '/').split('?')[0], requestId)));
  }

  const server = options.tls
    ? https.createServer({ cert: readFileSync(options.tls.cert), key: readFileSync(options.tls.key) }, dispatch)
    : http.createServer(dispatch);
  // Longer than common load balancers' idle timeouts, so they close first and never hit a dead socket.
  server.keepAliveTimeout = 65_000;

  return {
    server,
    hosts: { api: apiHost, keys: keysHost },
    listen(port: number, host: string): Promise<number> {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve((server.address() as AddressInfo).port);
        });
      });
    },
    close(): Promise<void> {
      return new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
