// Composition of a worker: settings → GPUs → runtime → agent and task runner → link. What `svc agent` runs, and what
// `svc serve` runs in-process (linking to itself over loopback, or, without `link`, handing the bare
// agent to the caller).
import { createHash } from 'node:crypto';
import { hostname } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from '../logger.ts';
import { isLoopbackHost } from '../http/host.ts';
import { startAgent, type Agent } from './agent.ts';
import { httpAssetFetcher, stageAssets } from './assets.ts';
import { discoverGpus } from './gpus.ts';
import { ResultKeeper } from './keeper.ts';
import { connectAgentLink, type AgentLink } from './link.ts';
import { keepingOutput, OutputLogs } from './output-logs.ts';
import type { GpuOffer } from './protocol.ts';
import { UnstartableError, type Runtime } from './runtime.ts';
import { startTaskRunner, type TaskRunner } from './task-runner.ts';
import { httpResultUploader } from './task-results.ts';
import { createDockerRuntime, dockerRuntimeSettings } from './runtimes/docker.ts';
import { dockerSocketPath } from './runtimes/docker-api.ts';
import { createProcessRuntime } from './runtimes/process.ts';
import { openSandbox } from './sandbox/sandbox.ts';
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
  /** For the process runtime's sandbox: host ports instances may open (the gateway's), paths of the platform to hide. */
  sandbox?: { doors: number[]; hidden: string[] };
}

export interface Worker {
  agent: Agent;
  tasks: TaskRunner;
  /** What the instances and tasks wrote (served over the link). */
  outputs: OutputLogs;
  gpus: GpuOffer[];
  link?: AgentLink;
  /** Where its result keeper listens (a linked worker's). */
  keeperOrigin?: string;
  isolation: Isolation;
  /** Closes the link, then stops every instance and task. */
  close(): Promise<void>;
}

/**
 * How the agent's instances are kept apart: a sandbox (process runtime) or a container; none because this
 * host cannot give one (`reason`), so only the cluster's own account runs here; or none on purpose (the
 * sandbox turned off: development).
 */
export type Isolation = { kind: 'sandbox' | 'container' } | { kind: 'none'; reason: string } | { kind: 'off' };

/** The isolation in one line, for the banners of svc serve and svc agent (docs/security.md). */
export function isolationLine(isolation: Isolation): string {
  switch (isolation.kind) {
    case 'sandbox': return 'each in a sandbox of its own (own user, namespaces and network; memory, CPU and pids capped)';
    case 'container': return 'each in a container (docker runtime)';
    case 'off': return 'NO sandbox (compute.agent.sandbox off): every account\'s code runs as this user; development only';
    case 'none': return `NO sandbox here (${isolation.reason}): only the cluster's own account's functions run here`;
  }
}

export async function startWorker(options: WorkerOptions): Promise<Worker> {
  const log = options.log.child({ component: 'agent' });
  const stateDir = path.resolve(options.settings.stateDir ?? path.join(options.dataDir, 'agent'));
  const discovery = await discoverGpus(options.declaredGpus);
  log.info({ source: discovery.source, reason: discovery.reason, gpus: discovery.gpus.map((gpu) => `${gpu.name}x${gpu.capacity ?? '?'}`) }, 'GPUs');
  const { runtime: chosen, isolation } = await createRuntime(options, stateDir, log);
  let owner: string | undefined;
  const unisolated = isolation.kind === 'none' ? isolation.reason : undefined;
  if (unisolated) log.warn({ reason: unisolated }, 'instances run without a sandbox: only this cluster\'s own account may run here');
  if (isolation.kind === 'off') log.warn('the sandbox is off: every account\'s instances run as this agent\'s user (development only)');
  const outputs = new OutputLogs({ maxBytesPerInstance: options.settings.logBytesPerInstance, retentionMs: options.settings.logRetentionMs });
  const runtime = keepingOutput(unisolated ? ownAccountOnly(chosen, () => owner, unisolated) : chosen, outputs);
  const agent = await startAgent({
    runtime, stateDir, log,
    stopGraceMs: options.settings.stopGraceMs,
    backoff: {
      initialMs: options.settings.restartInitialMs, maxMs: options.settings.restartMaxMs,
      resetAfterMs: options.settings.restartResetAfterMs,
    },
    probe: { intervalMs: options.settings.healthIntervalMs, failureThreshold: options.settings.healthFailureThreshold },
  });
  // Uploads and asset downloads go to the server the link uses now (it may name several: link.ts).
  const server = options.link && { ...options.link, get server(): string { return link?.server ?? options.link!.server.split(',')[0]; } };
  // After startAgent: its runtime.cleanup() has ended whatever an earlier run left, tasks included.
  const tasks = await startTaskRunner({
    runtime, stateDir, log, outputs, progressIntervalMs: options.settings.taskProgressIntervalMs,
    uploader: server && httpResultUploader(server),
  });
  const keeper = options.link && await startKeeper(agent, options.settings, log);
  const link: AgentLink | undefined = options.link && connectAgentLink({
    ...options.link, agent, tasks, outputs, keeper, gpus: discovery.gpus, agentVersion: AGENT_VERSION, log, unisolated, node: options.settings.nodeName ?? hostname(),
    stage: (request) => stageAssets(agent.endpointOf(request.instanceId)?.outputDir, request, httpAssetFetcher(server!)),
    onWelcome: (welcome) => { owner = welcome.ncaId; },
  });
  return {
    agent,
    tasks,
    outputs,
    gpus: discovery.gpus,
    link,
    keeperOrigin: keeper?.origin,
    isolation,
    async close() {
      await link?.close();
      await keeper?.keeper.close();
      // A stopping agent does not wait out a task's own (long) grace period.
      await Promise.all([agent.stop(), tasks.stop(options.settings.stopGraceMs)]);
      await runtime.close?.();
    },
  };
}

/** A linked agent's result keeper, on the address the replicas reach its instances at (compute/keeper.ts). */
async function startKeeper(agent: Agent, settings: AgentSettings, log: Logger) {
  const keeper = new ResultKeeper({ endpointOf: (instanceId) => agent.endpointOf(instanceId), log });
  return { keeper, origin: await keeper.listen(settings.advertiseHost, settings.keeperPort) };
}

/** The runtime the settings name; for the process runtime, its sandbox, or why it runs without one. */
export async function createRuntime(options: WorkerOptions, stateDir: string, log: Logger): Promise<{ runtime: Runtime; isolation: Isolation }> {
  const { settings } = options;
  const common = {
    advertiseHost: settings.advertiseHost, udpPortRange: settings.udpPortRange,
    udpPortsPerInstance: settings.udpPortsPerInstance, log,
  };
  if (settings.runtime === 'docker') {
    return {
      isolation: { kind: 'container' },
      runtime: createDockerRuntime({
        ...common, ...dockerRuntimeSettings(settings), socketPath: settings.dockerSocket ?? dockerSocketPath(), agentName: agentNameOf(stateDir),
        // Containers may open the gateway's public port (the in-process agent's door) beside the configured ones.
        hostPorts: [...settings.dockerHostPorts, ...(options.sandbox?.doors ?? [])],
      }),
    };
  }
  const catalogFile = path.resolve(settings.imageCatalog);
  const unsandboxed = () => createProcessRuntime({ ...common, catalogFile, stateDir });
  if (settings.sandbox === 'off') return { runtime: unsandboxed(), isolation: { kind: 'off' } };
  const opened = await openSandbox({
    readOnly: settings.sandboxReadOnlyPaths?.map((dir) => path.resolve(dir)) ?? [REPOSITORY, path.dirname(catalogFile)],
    hidden: [stateDir, path.resolve(options.dataDir), ...(options.sandbox?.hidden ?? [])],
    subnet: settings.sandboxSubnet.split('/')[0], uidBase: settings.sandboxUidBase, doors: options.sandbox?.doors ?? [],
    ...(isLoopbackHost(settings.advertiseHost) ? {} : { advertise: settings.advertiseHost }),
    agentTag: agentNameOf(stateDir), stateDir, log,
  });
  if (!('unavailable' in opened)) {
    return { runtime: createProcessRuntime({ ...common, catalogFile, stateDir, sandbox: { sandbox: opened, limits: settings } }), isolation: { kind: 'sandbox' } };
  }
  if (settings.sandbox === 'on') throw new Error(`compute.agent.sandbox is on, but ${opened.unavailable}`);
  return { runtime: unsandboxed(), isolation: { kind: 'none', reason: opened.unavailable } };
}

/** Without isolation, instances of other accounts than the cluster's own are refused (the control plane places none). */
function ownAccountOnly(runtime: Runtime, owner: () => string | undefined, reason: string): Runtime {
  return {
    ...runtime,
    async start(spec, context) {
      const account = owner();
      if (spec.ncaId !== account) {
        throw new UnstartableError(`this agent runs instances without a sandbox (${reason}): only account ${account ?? '(not yet known)'} may run here`);
      }
      return runtime.start(spec, context);
    },
  };
}

/** The repository this agent runs from: the samples and the modules they load. */
const REPOSITORY = fileURLToPath(new URL('../../../', import.meta.url)).replace(/\/$/, '');

/**
 * What marks this agent's containers (label svc.agent): its state dir, which is what an agent keeps across
 * restarts on its host. Agents sharing one engine (several platforms, a platform and `svc agent`s) then
 * never remove each other's containers at start-up.
 */
export function agentNameOf(stateDir: string): string {
  return `svc-agent-${createHash('sha256').update(stateDir).digest('hex').slice(0, 12)}`;
}
