// Composition of a worker: settings → GPUs → runtime → agent → link. What `svc agent` runs, and what
// `svc serve` runs in-process (linking to itself over loopback, or, without `link`, handing the bare
// agent to the caller).
import path from 'node:path';
import type { Logger } from '../logger.ts';
import { startAgent, type Agent } from './agent.ts';
import { discoverGpus } from './gpus.ts';
import { connectAgentLink, type AgentLink } from './link.ts';
import type { GpuOffer } from './protocol.ts';
import type { Runtime } from './runtime.ts';
import { createDockerRuntime } from './runtimes/docker.ts';
import { dockerSocketPath } from './runtimes/docker-api.ts';
import { createProcessRuntime } from './runtimes/process.ts';
import type { AgentSettings } from './settings.ts';

export const AGENT_VERSION = '0.1.0';

export interface WorkerOptions {
  settings: AgentSettings;
  /** store.dataDir: the state dir defaults to <dataDir>/agent. */
  dataDir: string;
  /** Offered when nvidia-smi finds no GPU (config compute.localCluster.gpus). */
  declaredGpus: GpuOffer[];
  log: Logger;
  /** Connect to a control plane; omit to wire the agent in-process yourself. */
  link?: { server: string; credential: string; apiHost?: string; ca?: string };
}

export interface Worker {
  agent: Agent;
  gpus: GpuOffer[];
  link?: AgentLink;
  /** Closes the link, then stops every instance. */
  close(): Promise<void>;
}

export async function startWorker(options: WorkerOptions): Promise<Worker> {
  const log = options.log.child({ component: 'agent' });
  const stateDir = path.resolve(options.settings.stateDir ?? path.join(options.dataDir, 'agent'));
  const discovery = await discoverGpus(options.declaredGpus);
  log.info({ source: discovery.source, reason: discovery.reason, gpus: discovery.gpus.map((gpu) => `${gpu.name}x${gpu.capacity ?? '?'}`) }, 'GPUs');
  const runtime = createRuntime(options.settings, stateDir, log);
  const agent = await startAgent({
    runtime, stateDir, log,
    stopGraceMs: options.settings.stopGraceMs,
    backoff: {
      initialMs: options.settings.restartInitialMs, maxMs: options.settings.restartMaxMs,
      resetAfterMs: options.settings.restartResetAfterMs,
    },
    probe: { intervalMs: options.settings.healthIntervalMs, failureThreshold: options.settings.healthFailureThreshold },
  });
  const link = options.link && connectAgentLink({
    ...options.link, agent, gpus: discovery.gpus, agentVersion: AGENT_VERSION, log,
  });
  return {
    agent,
    gpus: discovery.gpus,
    link,
    async close() {
      await link?.close();
      await agent.stop();
    },
  };
}

export function createRuntime(settings: AgentSettings, stateDir: string, log: Logger): Runtime {
  const common = {
    advertiseHost: settings.advertiseHost, udpPortRange: settings.udpPortRange,
    udpPortsPerInstance: settings.udpPortsPerInstance, log,
  };
  if (settings.runtime === 'docker') {
    return createDockerRuntime({
      ...common, socketPath: settings.dockerSocket ?? dockerSocketPath(),
      publishAddress: settings.dockerPublishAddress, gpus: settings.dockerGpus,
    });
  }
  return createProcessRuntime({ ...common, catalogFile: path.resolve(settings.imageCatalog), stateDir });
}
