// The proxy's settings, read once from the environment at start-up. A missing or malformed value
// stops the process with one line naming the variable (`proxy: SVC_API_KEY is required`), so a
// misconfigured container fails at once instead of at the first browser connection.
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import path from 'node:path';

export class ConfigError extends Error {}

export interface AuthConfig {
  /** `jwt`: every request needs a user token; `disabled`: development only, anyone may connect. */
  mode: 'jwt' | 'disabled';
  jwksUrl?: URL;
  issuer?: string;
  audience?: string;
}

export interface UpstreamConfig {
  /** Where the proxy connects: scheme, host and port of the platform gateway. */
  url: URL;
  /** Host header sent to the gateway, which routes by it. */
  host: string;
  /** Name the gateway's certificate is checked against (and sent as SNI); none for IP addresses. */
  servername?: string;
  /** Extra trusted CA certificates (PEM) for self-hosted platforms with a private CA. */
  ca?: string;
  caFile?: string;
  /** Certificate verification; off only through the explicit development flag. */
  verifyTls: boolean;
}

export interface ListenConfig {
  host: string;
  port: number;
  /** `off`: plain HTTP; `self-signed`: development TLS; `files`: TLS with the given PEM files. */
  tls: 'off' | 'self-signed' | 'files';
  certFile?: string;
  keyFile?: string;
}

export interface TimeoutConfig {
  /** Browser side: longest silence before the browser counts as gone. */
  clientMs: number;
  /** Platform side: longest wait for a response, and longest silence of an open tunnel. */
  serverMs: number;
  /** Platform side: longest TCP + TLS connect. */
  connectMs: number;
  /** Longest time to receive a request's headers and body. */
  httpRequestMs: number;
  /** How often silent WebSocket peers are pinged; shorter than both idle timeouts. */
  pingIntervalMs: number;
}

export interface ProxyConfig {
  apiKey: string;
  functionId: string;
  functionVersionId?: string;
  upstream: UpstreamConfig;
  /** Platform connections kept established ahead of demand, so an open skips the TCP and TLS handshakes. */
  upstreamSpares: number;
  listen: ListenConfig;
  auth: AuthConfig;
  timeouts: TimeoutConfig;
  cookies: { domain?: string; path: string };
  /** Directory of the browser client, served under /client/; none disables serving. */
  clientDir?: string;
  logLevel: string;
}

export const DEFAULT_PORT = 49100;
const DEFAULT_CLIENT_DIR = path.resolve(import.meta.dirname, '../../streaming-app/client');
const LOG_LEVELS = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

type Env = Record<string, string | undefined>;

export function loadConfig(env: Env = process.env): ProxyConfig {
  const read = (name: string) => {
    const value = env[name]?.trim();
    return value ? value : undefined;
  };
  const required = (name: string, hint = '') => read(name) ?? fail(`${name} is required${hint}`);

  const apiKey = required('SVC_API_KEY');
  const functionId = required('STREAMING_FUNCTION_ID');
  const functionVersionId = read('STREAMING_FUNCTION_VERSION_ID');

  const authDisabled = flag(env, 'PROXY_AUTH_DISABLED');
  const devHint = ' (or PROXY_AUTH_DISABLED=true for development)';
  const auth: AuthConfig = authDisabled
    ? { mode: 'disabled' }
    : {
        mode: 'jwt',
        jwksUrl: url('PROXY_AUTH_JWKS_URL', required('PROXY_AUTH_JWKS_URL', devHint), ['https:', 'http:']),
        issuer: required('PROXY_AUTH_ISSUER', devHint),
        audience: required('PROXY_AUTH_AUDIENCE', devHint),
      };

  const timeouts: TimeoutConfig = {
    clientMs: integer(env, 'PROXY_TIMEOUT_CLIENT_MS', 7_000),
    serverMs: integer(env, 'PROXY_TIMEOUT_SERVER_MS', 7_000),
    connectMs: integer(env, 'PROXY_TIMEOUT_CONNECT_MS', 4_000),
    httpRequestMs: integer(env, 'PROXY_TIMEOUT_HTTP_REQUEST_MS', 30 * 60_000),
    pingIntervalMs: integer(env, 'PROXY_PING_INTERVAL_MS', 2_000),
  };
  // A live peer answers a ping within one interval; the interval must leave room for that before the
  // idle timeout ends the connection.
  if (timeouts.pingIntervalMs >= Math.min(timeouts.clientMs, timeouts.serverMs)) {
    fail('PROXY_PING_INTERVAL_MS must be shorter than PROXY_TIMEOUT_CLIENT_MS and PROXY_TIMEOUT_SERVER_MS');
  }

  const logLevel = read('PROXY_LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.has(logLevel)) fail(`PROXY_LOG_LEVEL must be one of ${[...LOG_LEVELS].join(', ')}`);

  const clientDirSetting = read('PROXY_CLIENT_DIR');
  return {
    apiKey,
    functionId,
    functionVersionId,
    upstream: upstreamConfig(env, read),
    upstreamSpares: integer(env, 'PROXY_UPSTREAM_SPARES', 1, 0),
    listen: listenConfig(env, read),
    auth,
    timeouts,
    cookies: { domain: read('PROXY_COOKIE_DOMAIN'), path: read('PROXY_COOKIE_PATH') ?? '/' },
    clientDir: clientDirSetting === 'off' ? undefined : path.resolve(clientDirSetting ?? DEFAULT_CLIENT_DIR),
    logLevel,
  };
}

function upstreamConfig(env: Env, read: (name: string) => string | undefined): UpstreamConfig {
  // The default mirrors the platform's own: the gateway address (SVC_GATEWAY_ADDRESS, `localhost`
  // when unset) on TLS port 443, addressed as api.<address> because the gateway routes by Host.
  const gatewayAddress = read('SVC_GATEWAY_ADDRESS') ?? 'localhost';
  const server = read('SVC_SERVER');
  // A bare host name (the reference proxy's form, `SVC_SERVER=gateway.example.com`) means TLS on 443.
  const serverUrl = url('SVC_SERVER', server ? (/^[a-z][a-z0-9+.-]*:\/\//i.test(server) ? server : `https://${server}`) : `https://${gatewayAddress}`, ['https:', 'http:']);
  if (serverUrl.pathname !== '/' || serverUrl.search) fail('SVC_SERVER must be a scheme, host and port only (no path)');

  const host = read('SVC_SERVER_HOST') ?? (server ? serverUrl.host : `api.${gatewayAddress}`);
  const hostname = hostnameOf(host);
  const caFile = read('SVC_CA_FILE');
  let ca: string | undefined;
  if (caFile) {
    try {
      ca = readFileSync(caFile, 'utf8');
    } catch (error) {
      fail(`SVC_CA_FILE cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
    }
    if (!ca.includes('-----BEGIN CERTIFICATE-----')) fail('SVC_CA_FILE holds no PEM certificate');
  }
  return {
    url: serverUrl,
    host,
    servername: isIP(hostname) ? undefined : hostname,
    ca,
    caFile,
    verifyTls: !flag(env, 'SVC_TLS_SKIP_VERIFY'),
  };
}

function listenConfig(env: Env, read: (name: string) => string | undefined): ListenConfig {
  const port = integer(env, 'PROXY_PORT', DEFAULT_PORT, 0);
  if (port > 65_535) fail('PROXY_PORT must be at most 65535');
  const certFile = read('PROXY_TLS_CERT');
  const keyFile = read('PROXY_TLS_KEY');
  if (Boolean(certFile) !== Boolean(keyFile)) fail(`${certFile ? 'PROXY_TLS_KEY' : 'PROXY_TLS_CERT'} is required when ${certFile ? 'PROXY_TLS_CERT' : 'PROXY_TLS_KEY'} is set`);
  const selfSigned = flag(env, 'PROXY_SSL_INSECURE');
  if (selfSigned && certFile) fail('PROXY_SSL_INSECURE=true and PROXY_TLS_CERT exclude each other');
  return {
    host: read('PROXY_HOST') ?? '0.0.0.0',
    port,
    tls: certFile ? 'files' : selfSigned ? 'self-signed' : 'off',
    certFile,
    keyFile,
  };
}

function flag(env: Env, name: string): boolean {
  const value = env[name]?.trim().toLowerCase();
  if (value === undefined || value === '' || value === 'false') return false;
  if (value === 'true') return true;
  return fail(`${name} must be true or false`);
}

function integer(env: Env, name: string, fallback: number, minimum = 1): number {
  const value = env[name]?.trim();
  if (value === undefined || value === '') return fallback;
  const number = Number(value);
  if (!Number.isSafeInteger(number) || number < minimum) fail(`${name} must be an integer ≥ ${minimum}`);
  return number;
}

function url(name: string, value: string, protocols: string[]): URL {
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch {
    return fail(`${name} is not a valid URL`);
  }
  if (!protocols.includes(parsed.protocol)) fail(`${name} must use ${protocols.map((p) => p.slice(0, -1)).join(' or ')}`);
  return parsed;
}

export function hostnameOf(host: string): string {
  if (host.startsWith('[')) return host.slice(1, host.indexOf(']'));
  const colon = host.lastIndexOf(':');
  return colon === -1 ? host : host.slice(0, colon);
}

function fail(message: string): never {
  throw new ConfigError(`proxy: ${message}`);
}
