// What a container may do, as HostConfig fields the Engine API takes (Docker's and podman's alike): its own
// user namespace, no capabilities, no privilege escalation, the engine's default seccomp profile (never
// replaced), the memory, CPU and pids of its instance type (compute/limits.ts), optionally a read-only
// root with a tmpfs on /tmp, and the OCI runtime of the agent's choice (gVisor's runsc).
import type { Limits } from '../limits.ts';
import { UnstartableError } from '../runtime.ts';
import type { DockerApi } from './docker-api.ts';
import { z } from 'zod';

export interface SandboxOptions {
  /** `auto`: a host uid/gid range of the container's own; `engine`: whatever the engine does. */
  userns: 'auto' | 'engine';
  readOnlyRoot: boolean;
  /** The engine's OCI runtime name (HostConfig.Runtime), e.g. runsc. */
  runtime?: string;
}

/** 65536 ids: every uid an image may use (nobody is 65534). */
const AUTO_USERNS = 'auto:size=65536';

export function sandboxHostConfig(limits: Limits, options: SandboxOptions): Record<string, unknown> {
  return {
    ...(options.userns === 'auto' ? { UsernsMode: AUTO_USERNS } : {}),
    CapDrop: ['ALL'],
    SecurityOpt: ['no-new-privileges'],
    // Without capabilities a server could not bind a port below 1024; in its own network namespace that
    // is harmless (Docker's own default since 20.10).
    Sysctls: { 'net.ipv4.ip_unprivileged_port_start': '0' },
    Memory: limits.memoryBytes,
    MemorySwap: limits.memoryBytes, // no swap on top
    NanoCpus: Math.round(limits.cpuCores * 1e9),
    PidsLimit: limits.pids,
    ...(options.readOnlyRoot ? { ReadonlyRootfs: true, Tmpfs: { '/tmp': 'rw,nosuid,nodev,mode=1777' } } : {}),
    ...(options.runtime ? { Runtime: options.runtime } : {}),
  };
}

/** The engine's words when userns `auto` has no subordinate ids to take a range from. */
const NO_SUBORDINATE_IDS = /available IDs|subuid|subgid|no subordinate/i;

/** A create refused for want of subordinate ids cannot start until the host is set up: say how. */
export function explainCreateFailure(error: Error, options: SandboxOptions): Error {
  if (options.userns === 'auto' && NO_SUBORDINATE_IDS.test(error.message)) {
    return new UnstartableError(`${error.message}: the container engine has no subordinate ids for per-container user namespaces `
      + '(add "containers:2147483647:2147483648" to /etc/subuid and /etc/subgid, docs/containers.md) or set dockerUserns: engine');
  }
  return error;
}

const createdInspect = z.object({ HostConfig: z.object({ Runtime: z.string().nullish() }).nullish() });
const engineInfo = z.object({ DefaultRuntime: z.string().nullish() });

/**
 * Docker honours HostConfig.Runtime; podman's Docker-compatible API ignores it and runs its own default
 * (containers.conf `runtime`). Either way the container must run on the runtime asked for, or not at all.
 */
export async function checkRuntime(api: DockerApi, containerId: string, wanted: string): Promise<void> {
  const created = await api.call('GET', `/containers/${containerId}/json`, {}, createdInspect);
  if (created.HostConfig?.Runtime === wanted) return;
  const info = await api.call('GET', '/info', {}, engineInfo);
  if (info.DefaultRuntime === wanted) return;
  throw new UnstartableError(`the container engine runs ${info.DefaultRuntime ?? 'its default runtime'}, not ${wanted} (dockerRuntime): `
    + `register ${wanted} with the engine (podman: containers.conf runtime = "${wanted}", docs/containers.md)`);
}

/** What the engine says of a container that has ended: was it killed for memory? */
export const endedInspect = z.object({ State: z.object({ OOMKilled: z.boolean().nullish() }).nullish() });

/** Why a container the kernel killed for memory ended (ExitStatus.reason), as the process runtime says it. */
export function outOfMemory(limits: Limits): string {
  return `killed: out of memory (limit ${Math.round(limits.memoryBytes / 2 ** 20)} MiB)`;
}
