// Starts the proxy in-process on port 0 against a platform and identity provider, with its log lines
// collected for assertions.
import { loadConfig } from '../../src/config.ts';
import { createLogger } from '../../src/logger.ts';
import { createStreamingProxy, type StreamingProxy } from '../../src/server.ts';
import { AUDIENCE, ISSUER, type IdentityProvider } from './identity.ts';
import type { PlatformUnderTest } from './platform-upstream.ts';

export interface RunningProxy {
  proxy: StreamingProxy;
  port: number;
  /** http(s)://127.0.0.1:<port> */
  url: string;
  /** ws(s)://127.0.0.1:<port> */
  wsUrl: string;
  logs: Record<string, unknown>[];
  /** Everything the proxy logged, as written. */
  readonly logText: string;
  close(): Promise<void>;
}

export function proxyEnv(platform: PlatformUnderTest, identity: IdentityProvider | undefined, env: Record<string, string> = {}): Record<string, string> {
  return {
    SVC_API_KEY: platform.apiKey,
    STREAMING_FUNCTION_ID: platform.functionId,
    SVC_SERVER: platform.server,
    SVC_SERVER_HOST: platform.host,
    SVC_CA_FILE: platform.ca.certFile,
    PROXY_PORT: '0',
    PROXY_HOST: '127.0.0.1',
    PROXY_LOG_LEVEL: 'debug',
    ...(identity
      ? { PROXY_AUTH_JWKS_URL: identity.jwksUrl, PROXY_AUTH_ISSUER: ISSUER, PROXY_AUTH_AUDIENCE: AUDIENCE }
      : { PROXY_AUTH_DISABLED: 'true' }),
    ...env,
  };
}

export async function startProxy(platform: PlatformUnderTest, identity: IdentityProvider | undefined, env: Record<string, string> = {}): Promise<RunningProxy> {
  const config = loadConfig(proxyEnv(platform, identity, env));
  const lines: string[] = [];
  const logger = createLogger(config.logLevel, { write: (line: string) => { lines.push(line); } });
  const proxy = await createStreamingProxy(config, logger);
  const port = await proxy.listen();
  const secure = config.listen.tls !== 'off';
  return {
    proxy,
    port,
    url: `${secure ? 'https' : 'http'}://127.0.0.1:${port}`,
    wsUrl: `${secure ? 'wss' : 'ws'}://127.0.0.1:${port}`,
    get logs() {
      return lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    },
    get logText() {
      return lines.join('');
    },
    close: () => proxy.close(),
  };
}
