// npm start's streaming demo: the intermediary proxy (its own package and process) in front of the
// streaming sample, over TLS with a self-signed certificate and without user authentication, so it
// listens on loopback unless demoProxy.host says otherwise. It runs as an auxiliary process (it never
// outlives the platform), and a port it cannot have stops svc serve with one line instead of a banner
// that points at a dead URL (or at an older proxy still holding the port).
import { once } from 'node:events';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import type { StreamingDemo } from '../control/samples.ts';
import type { Logger } from '../logger.ts';
import { reapStale, startAuxiliary } from '../process/auxiliary.ts';
import { portFree, portInUse } from '../process/ports.ts';

const PROXY_MAIN = fileURLToPath(new URL('../../../proxy/src/main.ts', import.meta.url));
const START_TIMEOUT_MS = 30_000;

export interface DemoProxy {
  url: string;
  stop(): Promise<void>;
}

export async function startDemoProxy(options: {
  demo: StreamingDemo;
  gatewayUrl: string;
  apiHost: string;
  listen: { host: string; port: number };
  runDir: string;
  env: NodeJS.ProcessEnv;
  log: Logger;
}): Promise<DemoProxy> {
  const { host, port } = options.listen;
  const settings = 'demoProxy.host, demoProxy.port: SVC_DEMO_PROXY_HOST, SVC_DEMO_PROXY_PORT';
  // A proxy an earlier run left is ended first; a port still taken then belongs to something else.
  await reapStale(options.runDir, 'demo-proxy', options.log);
  if (!await portFree('tcp', host, port)) {
    throw portInUse('the demo proxy', `${host}:${port}`, settings);
  }
  const proxy = await startAuxiliary({
    name: 'demo-proxy', command: process.execPath, args: [PROXY_MAIN], runDir: options.runDir, output: 'inherit', log: options.log,
    env: {
      SVC_API_KEY: options.demo.apiKey, STREAMING_FUNCTION_ID: options.demo.functionId,
      SVC_SERVER: options.gatewayUrl.replace('localhost', '127.0.0.1'), SVC_SERVER_HOST: options.apiHost,
      PROXY_HOST: host, PROXY_PORT: String(port), PROXY_SSL_INSECURE: 'true', PROXY_AUTH_DISABLED: 'true',
      PROXY_LOG_LEVEL: options.env.SVC_LOG_LEVEL ?? 'info',
    },
  });
  let exitCode: number | null | undefined;
  void proxy.exited.then((code) => { exitCode = code; });
  for (const deadline = Date.now() + START_TIMEOUT_MS; !await accepts(host, port);) {
    if (exitCode !== undefined || Date.now() > deadline) {
      await proxy.stop();
      throw new Error(`the demo proxy did not start listening on ${host}:${port} (${settings})${exitCode === undefined ? '' : `: it exited with code ${exitCode}`}`);
    }
    await sleep(100);
  }
  let stopping = false;
  void proxy.exited.then((code) => stopping || options.log.error({ code }, 'the demo proxy exited; the streaming demo URL no longer works'));
  return {
    url: `https://${['127.0.0.1', '0.0.0.0', '::', '::1'].includes(host) ? 'localhost' : host}:${port}/client/`,
    stop() {
      stopping = true;
      return proxy.stop();
    },
  };
}

/** Nothing listens on host:port now (we could bind it). */
/** A TCP connection to the port is accepted. */
async function accepts(host: string, port: number): Promise<boolean> {
  const socket = net.connect(port, host === '0.0.0.0' ? '127.0.0.1' : host);
  try {
    await once(socket, 'connect');
    return true;
  } catch {
    return false;
  } finally {
    socket.destroy();
  }
}
