// `svc serve` (what `npm start` runs): the whole platform on this machine (main.ts), npm start's streaming
// demo proxy in front of the streaming sample, and the banner that says where everything is and what the
// streaming demo has to work with.
import path from 'node:path';
import type { Config } from '../config.ts';
import { createLogger } from '../logger.ts';
import { startPlatform, type Platform } from '../main.ts';
import { isolationLine } from '../compute/worker.ts';
import { isLoopbackHost } from '../http/host.ts';
import { startDemoProxy, type DemoProxy } from './demo-proxy.ts';
import { SVC_COMMAND } from './svc-command.ts';
import { untilStopped } from './stopped.ts';
import { streamingComponents, type StreamingComponents } from './streaming-components.ts';

export async function serve(config: Config, options: { samples: boolean; env: NodeJS.ProcessEnv }): Promise<void> {
  const platform = await startPlatform(config, { samples: options.samples });
  const components = streamingComponents(platform.turn);
  // A demo that cannot encode is not offered: its URL would only show an error.
  const proxy = platform.streamingDemo && components.canStream ? await startDemoProxy({
    demo: platform.streamingDemo, gatewayUrl: platform.url, apiHost: `${platform.hosts.api}:${platform.port}`, listen: config.demoProxy,
    runDir: path.join(config.store.dataDir, 'run'), env: options.env, log: createLogger(config.log.level),
  }).catch(async (error: unknown) => {
    await platform.close();
    throw error;
  }) : undefined;
  // Off loopback, output that is no terminal is a log (a pod's, a journal) that others read.
  const readPrivately = isLoopbackHost(config.gateway.host) || process.stdout.isTTY === true;
  console.log(banner(platform, proxy, components, readPrivately));
  await untilStopped();
  await proxy?.stop();
  await platform.close();
}

function banner(platform: Platform, proxy: DemoProxy | undefined, components: StreamingComponents, readPrivately: boolean): string {
  const lines = [
    'svc is running',
    `  API            ${platform.url}   (Host ${platform.hosts.api})`,
    `  Key service    Host ${platform.hosts.keys} on port ${platform.port}`,
    `  Invocation     Host <function id>.${platform.hosts.invocation} on port ${platform.port} (any method and path)`,
    `  Console        ${platform.url}/console/   (sign in with an API key or management token)`,
    `  OpenAPI        ${platform.url}/v3/openapi`,
    `  Health         ${platform.url}/health`,
    // Never the bearer itself: a server's output ends up in its logs (a pod's, a journal), and it lasts.
    `  Metrics        ${platform.url}/metrics${platform.metricsToken ? `   (wants a bearer: ${SVC_COMMAND} metrics token)` : ''}`,
  ];
  if (platform.isolation) lines.push(`  Instances      ${isolationLine(platform.isolation)}`);
  if (platform.samples.length) {
    lines.push('', `  Sample functions (invoke with an SVC_API_KEY: ${SVC_COMMAND} api-key generate):`);
    for (const sample of platform.samples.filter((candidate) => candidate.functionType !== 'STREAMING')) {
      lines.push(`    ${sample.name.padEnd(8)} POST ${platform.url}/v2/svc/pexec/functions/${sample.functionId}`);
    }
  }
  if (platform.streamingDemo) {
    lines.push('', proxy
      ? `  Streaming demo: open ${proxy.url}  (self-signed certificate: accept it; no user login in this demo)`
      : '  Streaming demo: not started, no video encoder (see below)', ...components.lines);
  }
  if (platform.bootstrapSecret && readPrivately) {
    lines.push('', `  Bootstrap secret (mints the first management token; works once): ${platform.bootstrapSecret}   until ${platform.bootstrapExpiresAt}`,
      `  Next: ${SVC_COMMAND} init --secret ${platform.bootstrapSecret}`);
  } else if (platform.bootstrapSecret) {
    lines.push('', `  Bootstrap secret: unused, works once until ${platform.bootstrapExpiresAt}; ${SVC_COMMAND} bootstrap secret prints it (with the store's settings)`);
  }
  return lines.join('\n');
}
