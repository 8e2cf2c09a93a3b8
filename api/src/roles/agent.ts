// `svc agent`: the worker agent of a registered cluster on its own host, linked to the control plane.
import { isolationLine, startWorker } from '../compute/worker.ts';
import type { Config } from '../config.ts';
import { createLogger } from '../logger.ts';
import { untilStopped } from './stopped.ts';

export async function runAgent(config: Config, link: { server: string; credential: string }): Promise<void> {
  const settings = config.compute.agent;
  const worker = await startWorker({
    settings, dataDir: config.store.dataDir, declaredGpus: [], log: createLogger(config.log.level),
    link: { ...link, apiHost: settings.apiHost ?? `api.${config.gateway.address}` },
  });
  console.log(`svc agent running (${worker.agent.runtimeName} runtime, GPUs: ${worker.gpus.map((gpu) => gpu.name).join(', ') || 'none'}), linked to ${link.server}\n`
    + `  instances: ${isolationLine(worker.isolation)}`);
  await untilStopped();
  await worker.close();
}
