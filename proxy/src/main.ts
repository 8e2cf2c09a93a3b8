// Composition root: `node proxy/src/main.ts` (or `npm start -w proxy`). Reads the environment, warns
// about every development shortcut in use, listens, and shuts down on SIGTERM/SIGINT.
import { ConfigError, loadConfig, type ProxyConfig } from './config.ts';
import { createLogger } from './logger.ts';
import { createStreamingProxy } from './server.ts';

let config: ProxyConfig;
try {
  config = loadConfig();
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
}

const logger = createLogger(config.logLevel);

// Development shortcuts are announced at every start, at warn level, so none goes unnoticed in logs.
if (config.auth.mode === 'disabled') {
  logger.warn('PROXY_AUTH_DISABLED=true: user authentication is OFF; anyone reaching this proxy can use the function with its API key (development only)');
}
if (!config.upstream.verifyTls) {
  logger.warn('SVC_TLS_SKIP_VERIFY=true: the platform\'s TLS certificate is NOT verified; the API key can be intercepted (development only)');
}
if (config.upstream.url.protocol === 'http:') {
  logger.warn('SVC_SERVER uses plain http: the API key travels unencrypted (development only)');
}
if (config.listen.tls === 'self-signed') {
  logger.warn('PROXY_SSL_INSECURE=true: serving TLS with a self-signed certificate; clients must accept an untrusted certificate (development only)');
}
// Timeouts designed with the platform's: it holds a sign-in up to streaming.answerWithinSeconds (3 s) while
// every instance is busy, so a shorter wait here would show people in line a 504 (docs/proxy.md).
if (config.timeouts.serverMs < 4000) {
  logger.warn(`PROXY_TIMEOUT_SERVER_MS=${config.timeouts.serverMs} leaves no room for the platform, which holds the sign-ins of people waiting in line up to 3 s: they would get 504s; keep it at 4000 or more`);
}

let proxy;
try {
  proxy = await createStreamingProxy(config, logger);
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
}

const port = await proxy.listen().catch((error: NodeJS.ErrnoException) => {
  process.stderr.write(`proxy: cannot listen on ${config.listen.host}:${config.listen.port}: ${error.code ?? error.message}\n`);
  process.exit(1);
});

logger.info({
  port,
  tls: config.listen.tls,
  functionId: config.functionId,
  functionVersionId: config.functionVersionId,
  platform: config.upstream.url.origin,
  platformHost: config.upstream.host,
  customCa: config.upstream.caFile,
  auth: config.auth.mode,
  client: config.clientDir,
}, 'proxy listening');

let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'proxy stopping');
    void proxy.close().finally(() => {
      logger.flush();
      process.exit(0);
    });
  });
}
