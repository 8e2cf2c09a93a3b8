// The docker runtime: each instance is a container, driven through the Docker Engine API on its unix
// socket (docker-api.ts). Tested against podman's Docker-compatible API (docs/containers.md) and against a
// protocol-level stand-in of the engine for the exact requests.
//
// start: make the image present (docker-image.ts: pull policy, X-Registry-Auth from the account's registry
// credential), create, start, inspect, then follow the logs and wait for the exit; the container is
// removed once it has ended.
// Ports: inside the container the function's own ports (inferencePort, health.port; for STREAMING the
// control port = health.port) with the port contract in its environment (port-contract.ts); each is
// published on an ephemeral host port of publishAddress, which the endpoint reports. The STREAMING UDP
// block is published 1:1 on all interfaces (media must match what the app advertises).
// Files: only the secrets file (read-only) and the directories the container writes, each at its host
// path (docker-files.ts).
// Isolation (docs/security.md, "Docker runtime"): a user namespace of its own, no capabilities, no
// privilege escalation, its instance type's memory, CPU and pids (docker-sandbox.ts), and a network of
// its account's that reaches neither other accounts nor the host (docker-network.ts, docker-firewall.ts).
// Every container carries the labels svc.agent=<agentName> and svc.instance=<instanceId>; cleanup()
// removes this agent's containers left from an earlier run, then its unused account networks; close(),
// once the agent's containers have stopped, its networks and firewall table.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../logger.ts';
import { fileNameFor, outputDirOf } from '../instance-env.ts';
import { limitsOf, type LimitDefaults, type Limits } from '../limits.ts';
import { z } from 'zod';
import type { InstanceSpec, PortMap } from '../protocol.ts';
import { UnstartableError, type ExitStatus, type Runtime, type RuntimeContext, type RuntimeInstance } from '../runtime.ts';
import { agentSettingsSchema, type AgentSettings } from '../settings.ts';
import { splitArgs } from './args.ts';
import { DockerApi, DockerError, FrameDemuxer } from './docker-api.ts';
import { containerBinds } from './docker-files.ts';
import { ensureImage, type PullPolicy } from './docker-image.ts';
import { AccountNetworks } from './docker-network.ts';
import { checkRuntime, endedInspect, explainCreateFailure, outOfMemory, sandboxHostConfig, type SandboxOptions } from './docker-sandbox.ts';
import { LogTail } from './log-tail.ts';
import { portEnvironment, portMap, portNeeds } from './port-contract.ts';
import { UdpPortPool } from './ports.ts';

export interface DockerRuntimeOptions {
  socketPath: string;
  /** Label value that marks this agent's containers (svc.agent). */
  agentName?: string;
  /** Address the invocation plane reaches instances at. */
  advertiseHost?: string;
  /** Host address the TCP ports are published on. */
  publishAddress?: string;
  udpPortRange?: [number, number];
  udpPortsPerInstance?: number;
  /** Give every container all GPUs (DeviceRequests, NVIDIA container toolkit). */
  gpus?: boolean;
  /** When to pull an instance's image (docker-image.ts); default `missing`. */
  pull?: PullPolicy;
  /** Caps where an instance type grants none (compute/limits.ts); default the agent settings' defaults. */
  limits?: LimitDefaults;
  /** `auto` (default): a host uid range per container; `engine`: the engine's choice. */
  userns?: SandboxOptions['userns'];
  /** `account` (default): a network per account behind the agent's firewall; `engine`: the engine's default network. */
  network?: 'account' | 'engine';
  /** Host ports containers on account networks may reach (the gateway's public port). */
  hostPorts?: number[];
  readOnlyRoot?: boolean;
  /** The engine's OCI runtime for every container (e.g. runsc). */
  ociRuntime?: string;
  log: Logger;
}

/** The docker runtime's options from the agent's settings. */
export function dockerRuntimeSettings(settings: AgentSettings): Omit<DockerRuntimeOptions, 'socketPath' | 'log'> {
  return {
    publishAddress: settings.dockerPublishAddress, gpus: settings.dockerGpus, pull: settings.dockerPull, limits: settings,
    userns: settings.dockerUserns, network: settings.dockerNetwork, hostPorts: settings.dockerHostPorts,
    readOnlyRoot: settings.dockerReadOnlyRoot, ociRuntime: settings.dockerRuntime,
  };
}

const DEFAULT_LIMITS: LimitDefaults = agentSettingsSchema.parse({});

/** STREAMING control port inside the container when the function's health.port is its inference port. */
const DEFAULT_CONTROL_PORT = 8011;
/** How long an ended container is kept for its log stream to finish before it is removed. */
const LOGS_AFTER_EXIT_MS = 5_000;
/** Pauses before each read of an ended container's stored log (lastLines): at once, then again while it lacks lines. */
const STORED_LOG_READS_MS = [0, 100, 200, 400, 800];

/** What the runtime reads of the engine's answers. */
const createdAnswer = z.object({ Id: z.string() });
const inspectAnswer = z.object({
  NetworkSettings: z.object({ Ports: z.record(z.string(), z.array(z.object({ HostIp: z.string(), HostPort: z.string() })).nullable()).nullish() }).nullish(),
});
const waitAnswer = z.object({ StatusCode: z.number().int() });

export function createDockerRuntime(options: DockerRuntimeOptions): Runtime {
  const api = new DockerApi(options.socketPath);
  const agentName = options.agentName ?? 'svc-agent';
  const advertiseHost = options.advertiseHost ?? '127.0.0.1';
  const publishAddress = options.publishAddress ?? '127.0.0.1';
  const udpPool = new UdpPortPool(options.udpPortRange ?? [47998, 48020], options.udpPortsPerInstance ?? 4);
  const networks = new AccountNetworks(api, agentName, options.hostPorts ?? [], options.log);
  const sandbox: SandboxOptions = { userns: options.userns ?? 'auto', readOnlyRoot: options.readOnlyRoot ?? false, runtime: options.ociRuntime };

  async function start(spec: InstanceSpec, context: RuntimeContext): Promise<RuntimeInstance> {
    if (!spec.containerImage) throw new UnstartableError('no containerImage');
    let cmd: string[];
    try {
      cmd = splitArgs(spec.containerArgs);
    } catch (error) {
      throw new UnstartableError((error as Error).message);
    }
    await ensureImage(api, spec, options.pull ?? 'missing');
    const limits = limitsOf(spec, options.limits ?? DEFAULT_LIMITS);
    const network = options.network === 'engine' ? undefined : await networks.of(spec.ncaId);

    // A task serves nothing: no ports are exposed or published, and no port contract is in its environment.
    const serves = spec.workload !== 'task';
    const needs = portNeeds(spec);
    const second = needs.streaming && !needs.healthOnSecond ? DEFAULT_CONTROL_PORT : spec.health.port;
    const udpRange = serves && needs.streaming ? await udpPool.take() : undefined;
    let containerId: string | undefined;
    try {
      const inside = portMap(needs, spec.inferencePort, needs.second ? second : undefined, udpRange);
      const tcpPorts = serves ? [inside.inference, ...(needs.second ? [second] : [])] : [];
      const udpPorts = udpRange ? range(udpRange[0], udpRange[1]) : [];
      const exposed: Record<string, object> = {};
      const bindings: Record<string, { HostIp: string; HostPort: string }[]> = {};
      for (const port of tcpPorts) {
        exposed[`${port}/tcp`] = {};
        bindings[`${port}/tcp`] = [{ HostIp: publishAddress, HostPort: '' }];
      }
      for (const port of udpPorts) {
        exposed[`${port}/udp`] = {};
        bindings[`${port}/udp`] = [{ HostIp: '', HostPort: String(port) }];
      }
      const env = { ...context.env, ...(serves ? portEnvironment(spec, inside) : {}) };
      const binds = await containerBinds(spec, context.workDir);
      const created = await api.call('POST', '/containers/create', {
        query: { name: `svc-${fileNameFor(spec.instanceId)}` },
        body: {
          Image: spec.containerImage,
          ...(cmd.length ? { Cmd: cmd } : {}),
          Env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
          ExposedPorts: exposed,
          Labels: {
            'svc.agent': agentName, 'svc.instance': spec.instanceId,
            'svc.function': spec.functionId, 'svc.function-version': spec.functionVersionId,
          },
          HostConfig: {
            PortBindings: bindings,
            Binds: binds,
            Init: true,
            ...(network ? { NetworkMode: network } : {}),
            ...sandboxHostConfig(limits, sandbox),
            ...(options.gpus ? { DeviceRequests: [{ Driver: 'nvidia', Count: -1, Capabilities: [['gpu']] }] } : {}),
          },
        },
      }, createdAnswer).catch((error: Error) => { throw explainCreateFailure(error, sandbox); });
      containerId = created.Id;
      if (sandbox.runtime) await checkRuntime(api, containerId, sandbox.runtime);
      await api.call('POST', `/containers/${containerId}/start`);
      const inspect = await api.call('GET', `/containers/${containerId}/json`, {}, inspectAnswer);
      const hostPort = (port: number) => {
        const published = Number(inspect.NetworkSettings?.Ports?.[`${port}/tcp`]?.[0]?.HostPort);
        if (!published) throw new Error(`container port ${port}/tcp was not published`);
        return published;
      };
      const ports: PortMap = serves
        ? portMap(needs, hostPort(inside.inference), needs.second ? hostPort(second) : undefined, udpRange)
        : { inference: 0, health: 0 };
      context.log.info({ containerId, image: spec.containerImage, ports }, 'instance container started');
      return running(containerId, ports, limits, context, () => { if (udpRange) udpPool.release(udpRange); });
    } catch (error) {
      if (containerId) await api.call('DELETE', `/containers/${containerId}`, { query: { force: true } }).catch(() => {});
      if (udpRange) udpPool.release(udpRange);
      throw error;
    }
  }

  function running(containerId: string, endpointPorts: PortMap, limits: Limits, context: RuntimeContext, release: () => void): RuntimeInstance {
    let tail = new LogTail();
    const logsRead = followLogs(containerId, tail, context).catch((error: unknown) => context.log.warn({ err: error }, 'container logs unavailable'));
    let ended = false;
    const exited = waitForExit(containerId).then(async (exit) => {
      ended = true;
      const status = await killedForMemory(containerId) ? { ...exit, reason: outOfMemory(limits) } : exit;
      // A container that ends at once may end before its logs were asked for: removed first, they would be lost.
      await Promise.race([logsRead, sleep(LOGS_AFTER_EXIT_MS, undefined, { ref: false })]);
      tail = await lastLines(containerId, tail);
      await api.call('DELETE', `/containers/${containerId}`, { query: { force: true } })
        .catch((error: unknown) => context.log.warn({ err: error, containerId }, 'container not removed'));
      release();
      context.log.info({ containerId, code: status.code }, 'instance container ended');
      return status;
    });
    return {
      endpoint: { host: advertiseHost, ports: endpointPorts, outputDir: outputDirOf(context.workDir), ownLoopback: true },
      exited,
      logTail: () => tail.lines(),
      async stop(graceMs: number) {
        if (!ended) {
          await api.call('POST', `/containers/${containerId}/stop`, { query: { t: Math.ceil(graceMs / 1000) } })
            .catch((error: unknown) => context.log.warn({ err: error, containerId }, 'container stop failed'));
        }
        await exited;
      },
    };
  }

  async function followLogs(containerId: string, tail: LogTail, context: RuntimeContext): Promise<void> {
    const response = await api.stream('GET', `/containers/${containerId}/logs`, {
      query: { follow: 1, stdout: 1, stderr: 1, tail: 50 },
    });
    const demuxer = new FrameDemuxer((stream, payload) => {
      tail.write(payload);
      context.output?.(stream, payload);
    });
    for await (const chunk of response) demuxer.push(chunk as Buffer);
  }

  /**
   * An ended container's last lines, for its failure report. podman's follow can miss lines of a container
   * that ends at once, while its stored log has them all; but a loaded engine may report the exit before it
   * has stored them (or fail the read), so a stored log with no lines, or fewer than the follow caught, is
   * read again a few times (about 1.5 s in all) before the follow's lines are kept instead. A container
   * removed meanwhile (cleanup) has no stored log to wait for.
   */
  async function lastLines(containerId: string, followed: LogTail): Promise<LogTail> {
    const caught = followed.lines().length;
    for (const pause of STORED_LOG_READS_MS) {
      if (pause) await sleep(pause, undefined, { ref: false });
      let stored: LogTail;
      try {
        stored = await readLogs(containerId);
      } catch (error) {
        if (error instanceof DockerError && error.status === 404) break;
        continue;
      }
      const count = stored.lines().length;
      if (count > 0 && count >= caught) return stored;
    }
    return followed;
  }

  async function readLogs(containerId: string): Promise<LogTail> {
    const response = await api.stream('GET', `/containers/${containerId}/logs`, { query: { stdout: 1, stderr: 1, tail: 50 } });
    const tail = new LogTail();
    const demuxer = new FrameDemuxer((_stream, payload) => tail.write(payload));
    for await (const chunk of response) demuxer.push(chunk as Buffer);
    return tail;
  }

  /** The exit code; survives a dropped connection to the engine by asking again. */
  async function waitForExit(containerId: string): Promise<ExitStatus> {
    for (;;) {
      try {
        const result = await api.call('POST', `/containers/${containerId}/wait`, { query: { condition: 'not-running' } }, waitAnswer);
        return { code: result.StatusCode, signal: null };
      } catch (error) {
        if (error instanceof DockerError && error.status === 404) return { code: null, signal: null };
        // Unreferenced: asking an engine that went away must not keep a process alive that has nothing else to do.
        await sleep(1000, undefined, { ref: false });
      }
    }
  }

  /** The engine's word (State.OOMKilled); an engine that cannot say (podman on cgroup v1) says no. */
  async function killedForMemory(containerId: string): Promise<boolean> {
    const ended = await api.call('GET', `/containers/${containerId}/json`, {}, endedInspect).catch(() => undefined);
    return ended?.State?.OOMKilled === true;
  }

  async function cleanup(): Promise<void> {
    const leftovers = await api.call('GET', '/containers/json', {
      query: { all: true, filters: JSON.stringify({ label: [`svc.agent=${agentName}`] }) },
    }, z.array(createdAnswer));
    for (const container of leftovers) {
      await api.call('DELETE', `/containers/${container.Id}`, { query: { force: true } })
        .catch((error: unknown) => options.log.warn({ err: error, containerId: container.Id }, 'leftover container not removed'));
    }
    if (leftovers.length) options.log.info({ containers: leftovers.map((c) => c.Id) }, 'removed containers left by an earlier run');
    await networks.cleanup();
  }

  return { name: 'docker', start, cleanup, close: () => networks.close() };
}

function range(first: number, last: number): number[] {
  return Array.from({ length: last - first + 1 }, (_, index) => first + index);
}
