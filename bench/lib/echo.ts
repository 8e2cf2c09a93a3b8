// The echo sample deployed for a bench: one instance, its pexec target.
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from '../../api/test/helpers/http.ts';
import type { LoadTarget } from './load.ts';

export const BODY = JSON.stringify({ message: 'hello', n: 42 });
export const JSON_TYPE = { 'content-type': 'application/json' };
/**
 * The echo answers the body alone, not the svc-* headers it was sent: every path then gets the same answer,
 * and what is compared is the proxies, not the size of what the echo writes back.
 */
const BODY_ONLY = [{ key: 'ECHO_HEADERS', value: 'false' }];

/**
 * Registers and deploys the echo sample through `url` with `slots` concurrent requests, each answered
 * `delayMs` after it came; its pexec target and version id.
 */
export async function deployEcho(url: string, credentials: { token: string; apiKey: string }, slots = 1024, delayMs = 0): Promise<{ target: LoadTarget; versionId: string }> {
  const api = (method: string, route: string, body?: unknown) => request(url, method, route, { host: 'api.localhost', bearer: credentials.token, body });
  const environment = delayMs ? [...BODY_ONLY, { key: 'ECHO_DELAY_MS', value: String(delayMs) }] : BODY_ONLY;
  const fn = (await api('POST', '/v2/svc/functions', {
    name: delayMs ? `bench-echo-${delayMs}ms` : 'bench-echo', containerImage: 'local/echo:1', inferenceUrl: '/echo', inferencePort: 8000, containerEnvironment: environment,
    health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT5S', expectedStatusCode: 200 },
  })).body.function;
  await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
    deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: slots }],
  });
  while ((await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status !== 'ACTIVE') await sleep(100);
  const target = {
    origin: url.replace('localhost', '127.0.0.1'), path: `/v2/svc/pexec/functions/${fn.id}`, body: BODY,
    headers: { ...JSON_TYPE, host: 'api.localhost', authorization: `Bearer ${credentials.apiKey}` },
  };
  return { target, versionId: fn.versionId };
}
