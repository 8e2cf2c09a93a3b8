// The one listener. Routes by Host: api.<address> → main API, api-keys.<address> → key service,
// invocation.<address> and *.invocation.<address> → invocation (host-routed functions, then by path); a
// bare loopback host (localhost:<port>) reaches the main API for local use; anything else is a 404
// problem naming the hosts served.
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { hostnameOf } from '../http/host.ts';
import { badRequest, Problem } from '../domain/problem.ts';
import { writeProblem } from '../http/problem-response.ts';
import { rejectUpgrade, writeSocketProblem } from '../http/upgrade.ts';

export type Handler = (req: IncomingMessage, res: ServerResponse) => void;
export type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer) => void;

export interface GatewayOptions {
  address: string;
  api: Handler;
  keys: Handler;
  /** invocation.<address> and its subdomains (invocation/host-routing.ts). */
  invocation: Handler;
  /** WebSocket upgrades on the api host (agent links, streaming sessions). */
  apiUpgrade?: UpgradeHandler;
  tls?: { cert: string; key: string };
}

const loopbackHosts = new Set(['localhost', '127.0.0.1', '[::1]', '::1']);

/** The host names served for a gateway `address`. */
export function hostsOf(address: string) {
  return { api: `api.${address}`, keys: `api-keys.${address}`, invocation: `invocation.${address}` };
}

export function createGateway(options: GatewayOptions) {
  const hosts = hostsOf(options.address);
  const { api: apiHost, keys: keysHost, invocation: invocationHost } = hosts;

  const isApiHost = (req: IncomingMessage) => {
    const host = hostnameOf(req.headers.host);
    return host === apiHost || loopbackHosts.has(host);
  };
  const isInvocationHost = (host: string) => host === invocationHost || host.endsWith(`.${invocationHost}`);
  const unknownHost = (req: IncomingMessage) => new Problem('not-found',
    `Unknown host '${hostnameOf(req.headers.host)}'; this gateway serves ${apiHost}, ${keysHost} and ${invocationHost} (with <function id>.${invocationHost})`);

  function dispatch(req: IncomingMessage, res: ServerResponse) {
    if (hostHeaders(req) > 1) return writeProblem(res, twoHosts(), req.url ?? '/', randomUUID());
    if (isApiHost(req)) return options.api(req, res);
    const host = hostnameOf(req.headers.host);
    if (host === keysHost) return options.keys(req, res);
    if (isInvocationHost(host)) return options.invocation(req, res);
    writeProblem(res, unknownHost(req), req.url ?? '/', randomUUID());
  }

  const server = options.tls
    ? https.createServer({ cert: readFileSync(options.tls.cert), key: readFileSync(options.tls.key) }, dispatch)
    : http.createServer(dispatch);
  // Longer than common load balancers' idle timeouts, so they close first and never hit a dead socket.
  server.keepAliveTimeout = 65_000;
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    if (hostHeaders(req) > 1) return rejectUpgrade(req, socket, twoHosts());
    if (isApiHost(req) && options.apiUpgrade) return options.apiUpgrade(req, socket, head);
    rejectUpgrade(req, socket, isApiHost(req) ? new Problem('not-found', 'No WebSocket endpoint here') : unknownHost(req));
  });
  server.on('clientError', refuseUnparsed);

  return {
    server,
    hosts,
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

/**
 * How many Host headers a request carries. Node keeps the first of several, and a proxy in front may have
 * routed on another, so a request with two is refused rather than served for a host it may not be for.
 */
function hostHeaders(req: IncomingMessage): number {
  let count = 0;
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 4 && raw[i].toLowerCase() === 'host') count++;
  return count;
}

const twoHosts = () => badRequest('A request must carry one Host header, not several');

/** A request Node's HTTP parser refused (a NUL in a header, headers too large, not HTTP) gets problem+json too. */
function refuseUnparsed(error: NodeJS.ErrnoException & { reason?: string }, socket: Duplex) {
  if (error.code === 'ECONNRESET' || !socket.writable) return socket.destroy();
  const problem = error.code === 'HPE_HEADER_OVERFLOW' ? new Problem('request-header-fields-too-large', 'The request\'s headers are too large')
    : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? new Problem('request-timeout', 'The request did not arrive in time')
      : badRequest(`The request is not valid HTTP${error.reason ? ` (${error.reason})` : ''}`);
  socket.once('finish', () => socket.destroy());
  writeSocketProblem(socket, problem, '/');
}
