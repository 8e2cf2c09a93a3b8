// The echo sample deployed on a `svc serve` of its own whose in-process agent uses the given runtime, for
// bench/runtime's rows through the gateway: POST /v2/svc/pexec/functions/{id} as a client sends it.
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { agentNameOf } from '../../api/src/compute/worker.ts';
import { request } from '../../api/test/helpers/http.ts';
import { removeContainers, type Engine } from '../../api/test/helpers/podman.ts';
import { servePlatform } from '../../api/test/helpers/served.ts';
import type { LoadTarget } from '../lib/load.ts';

const HEALTH = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT5S', expectedStatusCode: 200 };

export interface ServedEcho {
  target: LoadTarget;
  stop(): Promise<void>;
}

/** `engine` set: the docker runtime on it (image `containerImage`); else the process runtime (the samples' catalog); `env`: more settings. */
export async function serveEcho(containerImage: string, engine?: Engine, env: NodeJS.ProcessEnv = {}): Promise<ServedEcho> {
  const platform = await servePlatform({
    SVC_LOG_LEVEL: 'warn', SVC_TURN_SERVER: 'none', ...env,
    ...(engine ? { SVC_AGENT_RUNTIME: 'docker', SVC_AGENT_DOCKER_SOCKET: engine.socketPath } : {}),
  });
  const stop = async () => {
    await platform.stop();
    if (engine) await removeContainers(engine, `svc.agent=${agentNameOf(path.join(platform.dataDir, 'agent'))}`);
  };
  try {
    const { token, apiKey } = await platform.credentials(['invoke_function', 'list_functions']);
    const api = (method: string, url: string, body?: unknown) => request(platform.url, method, url, { host: 'api.localhost', bearer: token, body });
    const fn = (await api('POST', '/v2/svc/functions', { name: 'bench-echo', containerImage, inferenceUrl: '/echo', inferencePort: 8000, health: HEALTH })).body.function;
    await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 1024 }],
    });
    while ((await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status !== 'ACTIVE') await sleep(100);
    return {
      target: {
        origin: `http://127.0.0.1:${platform.port}`, path: `/v2/svc/pexec/functions/${fn.id}`,
        headers: { 'content-type': 'application/json', host: 'api.localhost', authorization: `Bearer ${apiKey}` },
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
