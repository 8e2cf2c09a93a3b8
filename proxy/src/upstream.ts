// The connection to the platform (spec §4.7 item 4): TLS with certificate verification against the
// system roots plus SVC_CA_FILE, one keep-alive agent so TLS sessions are resumed across WebSocket
// opens (a resumed handshake saves a round trip and the certificate checks), Nagle off.
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';
import type { ServerOptions } from 'http-proxy-3';
import type { ProxyConfig } from './config.ts';

export interface Upstream {
  agent: http.Agent;
  /** Options for http-proxy-3, shared by every request. */
  proxyOptions: ServerOptions;
  close(): void;
}

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
        ca: upstream.ca ? [...tls.rootCertificates, upstream.ca] : undefined,
        servername: upstream.servername,
      })
    : new http.Agent(agentOptions);
  return {
    agent,
    proxyOptions: {
      target: upstream.url.origin,
      agent,
      ws: true,
      secure: upstream.verifyTls,
      connectTimeout: timeouts.connectMs,
      proxyTimeout: timeouts.serverMs,
      xfwd: false,
    },
    close: () => agent.destroy(),
  };
}
