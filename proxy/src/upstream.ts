// The connection to the platform (spec §4.7 item 4): TLS with certificate verification against the
// system roots plus SVC_CA_FILE, through one keep-alive agent so TLS sessions are resumed across
// WebSocket opens (a resumed handshake skips the certificate exchange), Nagle off.
//
// Every WebSocket needs a connection of its own (an upgraded connection never returns to the pool),
// so the TCP and TLS handshakes would sit on every open's critical path. The proxy therefore keeps
// PROXY_UPSTREAM_SPARES connections (default 1) established ahead of demand, made through the agent
// itself so they are verified and resume sessions like any other, and replaced when older than
// SPARE_MAX_AGE_MS, which stays under common server idle timeouts. A taken spare is replaced once the
// platform has answered the request that took it: not earlier, so the new handshake does not compete
// with that answer for the platform's CPU, and not after a failure, so an unreachable or
// misconfigured platform is never dialled in a loop.
import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import tls from 'node:tls';
import type { ServerOptions } from 'http-proxy-3';
import type { ProxyConfig } from './config.ts';

const SPARE_MAX_AGE_MS = 30_000;

export interface Upstream {
  agent: http.Agent;
  /** Options for http-proxy-3, shared by every request. */
  proxyOptions: ServerOptions;
  /** Established connections waiting for a request. */
  readonly spares: number;
  /** Tops the spare connections up; called when the platform has answered a request. */
  replenish(): void;
  close(): void;
}

type CreateConnection = (options: Record<string, unknown>, callback?: (error: Error | null, socket?: Socket) => void) => Socket | undefined;

export function createUpstream(config: ProxyConfig): Upstream {
  const { upstream, timeouts } = config;
  const secure = upstream.url.protocol === 'https:';
  const agentOptions = {
    keepAlive: true,
    keepAliveMsecs: 1_000,
    // Idle pooled sockets close before the platform's own keep-alive timeout does.
    timeout: timeouts.serverMs,
    noDelay: true,
  };
  const agent = secure
    ? new https.Agent({
        ...agentOptions,
        maxCachedSessions: 256,
        rejectUnauthorized: upstream.verifyTls,
        // One context for every connection: given `ca` directly, each connection would build its own
        // certificate store from ~150 roots (milliseconds of CPU and most of a megabyte each).
        secureContext: tls.createSecureContext({ ca: upstream.ca ? [...tls.rootCertificates, upstream.ca] : undefined }),
        servername: upstream.servername,
      })
    : new http.Agent(agentOptions);
  const spares = new SpareConnections(agent, config.upstreamSpares);
  return {
    agent,
    proxyOptions: {
      target: upstream.url.origin,
      agent,
      ws: true,
      secure: upstream.verifyTls,
      connectTimeout: timeouts.connectMs,
      // The response timeout is set per request by the server (as a timeout error, mapped to 504).
      xfwd: false,
    },
    get spares() {
      return spares.size;
    },
    replenish: () => spares.fill(),
    close: () => {
      spares.close();
      agent.destroy();
    },
  };
}

interface Spare {
  socket: Socket;
  timer: NodeJS.Timeout;
}

class SpareConnections {
  readonly #target: number;
  readonly #create: CreateConnection;
  readonly #ready: Spare[] = [];
  /** The connect options of the first real connection; every request to the platform has the same. */
  #template: Record<string, unknown> | undefined;
  #closed = false;

  constructor(agent: http.Agent, target: number) {
    this.#target = target;
    const agentWithConnect = agent as unknown as { createConnection: CreateConnection };
    this.#create = agentWithConnect.createConnection.bind(agent);
    if (target === 0) return;
    agentWithConnect.createConnection = (options, callback) => {
      if (!this.#template) {
        // Only how to connect is kept, not the first request's headers.
        const { headers: _headers, path: _path, method: _method, ...connect } = options;
        this.#template = connect;
      }
      return this.#take() ?? this.#create(options, callback);
    };
  }

  get size(): number {
    return this.#ready.length;
  }

  #take(): Socket | undefined {
    for (let spare = this.#ready.shift(); spare; spare = this.#ready.shift()) {
      clearTimeout(spare.timer);
      spare.socket.off('close', this.#forget);
      if (!spare.socket.destroyed) return spare.socket;
    }
    return undefined;
  }

  readonly #forget = (): void => {
    for (let index = this.#ready.length - 1; index >= 0; index--) {
      if (this.#ready[index].socket.destroyed) {
        clearTimeout(this.#ready[index].timer);
        this.#ready.splice(index, 1);
      }
    }
  };

  fill(): void {
    if (this.#closed || !this.#template) return;
    while (this.#ready.length < this.#target) {
      const socket = this.#create({ ...this.#template });
      if (!socket) return;
      // Errors surface on the next real request, which connects afresh; a spare just disappears.
      socket.on('error', () => {});
      socket.once('close', this.#forget);
      const spare: Spare = {
        socket,
        timer: setTimeout(() => {
          this.#ready.splice(this.#ready.indexOf(spare), 1);
          socket.destroy();
          this.fill();
        }, SPARE_MAX_AGE_MS).unref(),
      };
      this.#ready.push(spare);
    }
  }

  close(): void {
    this.#closed = true;
    for (const spare of this.#ready.splice(0)) {
      clearTimeout(spare.timer);
      spare.socket.destroy();
    }
  }
}
