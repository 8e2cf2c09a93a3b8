// One cgroup per sandboxed instance: its memory, CPU and pids caps, the list of its processes (to signal
// and to kill them all, whatever namespaces and sessions they made), and whether the kernel killed one of
// them for memory. cgroup v2 (one hierarchy) where the host has it, else v1 (a directory per controller,
// under the agent's own cgroup of each: the host may have put the agent in a cgroup of its own).
//
// The agent's instances live under <root>/svc-sandbox/<agent tag>/<instance>, so a restarted agent finds
// and ends what its crashed run left there.
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Limits } from '../limits.ts';

const MOUNT = '/sys/fs/cgroup';
const V1_CONTROLLERS = ['memory', 'pids', 'cpu'] as const;
const CPU_PERIOD_US = 100_000;

export interface CgroupLayout {
  version: 1 | 2;
  /** The directories under which this agent's instance cgroups are made: one (v2) or one per controller (v1). */
  bases: string[];
}

/** Where this agent's instance cgroups go, or why there is no place for them. */
export function cgroupLayout(agentTag: string): CgroupLayout | { unavailable: string } {
  if (existsSync(path.join(MOUNT, 'cgroup.controllers'))) {
    const controllers = readFileSync(path.join(MOUNT, 'cgroup.controllers'), 'utf8').split(/\s+/);
    const missing = ['memory', 'pids', 'cpu'].filter((name) => !controllers.includes(name));
    if (missing.length) return { unavailable: `cgroup v2 lacks the ${missing.join(', ')} controller` };
    return { version: 2, bases: [path.join(MOUNT, 'svc-sandbox', agentTag)] };
  }
  const own = ownV1Paths();
  const missing = V1_CONTROLLERS.filter((name) => own.get(name) === undefined || !existsSync(path.join(MOUNT, name)));
  if (missing.length) return { unavailable: `no cgroup v1 ${missing.join(', ')} hierarchy at ${MOUNT}` };
  return { version: 1, bases: V1_CONTROLLERS.map((name) => path.join(MOUNT, name, own.get(name)!, 'svc-sandbox', agentTag)) };
}

/** The agent's own cgroup path in each v1 hierarchy, from /proc/self/cgroup ("4:memory:/some/path"). */
function ownV1Paths(): Map<string, string> {
  const paths = new Map<string, string>();
  for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const [, controllers, where] = line.split(':');
    for (const name of controllers?.split(',') ?? []) if (where !== undefined) paths.set(name, where);
  }
  return paths;
}

export class InstanceCgroup {
  readonly #layout: CgroupLayout;
  /** This instance's directory in each base. */
  readonly dirs: string[];

  constructor(layout: CgroupLayout, name: string) {
    this.#layout = layout;
    this.dirs = layout.bases.map((base) => path.join(base, name));
  }

  /** Makes the cgroup and sets its caps; an existing one (a leftover) is emptied first. */
  async create(limits: Limits): Promise<void> {
    if (this.#layout.version === 2) await enableV2Controllers(this.#layout.bases[0]);
    for (const dir of this.dirs) await mkdir(dir, { recursive: true });
    await this.kill();
    const quota = Math.round(limits.cpuCores * CPU_PERIOD_US);
    if (this.#layout.version === 2) {
      const [dir] = this.dirs;
      await writeFile(path.join(dir, 'memory.max'), String(limits.memoryBytes));
      await writeFile(path.join(dir, 'memory.swap.max'), '0').catch(() => {}); // no swap accounting on some hosts
      await writeFile(path.join(dir, 'pids.max'), String(limits.pids));
      await writeFile(path.join(dir, 'cpu.max'), `${quota} ${CPU_PERIOD_US}`);
      return;
    }
    const [memory, pids, cpu] = this.dirs;
    await writeFile(path.join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
    await writeFile(path.join(pids, 'pids.max'), String(limits.pids));
    await writeFile(path.join(cpu, 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
    await writeFile(path.join(cpu, 'cpu.cfs_quota_us'), String(quota));
  }

  /** The files a process writes its pid to in order to join the cgroup (before it runs anything else). */
  procsFiles(): string[] {
    return this.dirs.map((dir) => path.join(dir, 'cgroup.procs'));
  }

  /**
   * Every process in the cgroup (from its first hierarchy; the others hold the same processes). A process
   * the kernel cannot name in our pid namespace (one exiting, e.g. just killed for memory) reads as 0, and
   * kill(0) would signal the agent's own process group: only real pids are returned.
   */
  async pids(): Promise<number[]> {
    try {
      return (await readFile(path.join(this.dirs[0], 'cgroup.procs'), 'utf8')).split('\n').map(Number).filter((pid) => Number.isInteger(pid) && pid > 0);
    } catch {
      return [];
    }
  }

  /** Sends `signal` to every process in the cgroup except those in `spare`. */
  async signal(signal: NodeJS.Signals, spare: number[] = []): Promise<void> {
    for (const pid of await this.pids()) {
      if (spare.includes(pid)) continue;
      try {
        process.kill(pid, signal);
      } catch {
        // gone meanwhile
      }
    }
  }

  /** Kills every process in the cgroup, also those forked while it was being emptied. */
  async kill(): Promise<void> {
    for (let round = 0; round < 100; round++) {
      if (!(await this.pids()).length) return;
      await this.signal('SIGKILL');
      await sleep(10);
    }
  }

  /** How many times the kernel killed a process of this cgroup for memory. */
  async oomKills(): Promise<number> {
    const [file, key] = this.#layout.version === 2 ? ['memory.events', 'oom_kill'] : ['memory.oom_control', 'oom_kill'];
    try {
      const text = await readFile(path.join(this.dirs[0], file), 'utf8');
      return Number(new RegExp(`^${key} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
    } catch {
      return 0;
    }
  }

  /** Kills what is left and removes the cgroup. */
  async remove(): Promise<void> {
    await this.kill();
    for (const dir of this.dirs) await rmdir(dir).catch(() => {});
  }
}

/** The instance cgroups an earlier run of this agent left (their names). */
export async function leftoverCgroups(layout: CgroupLayout): Promise<string[]> {
  try {
    return (await readdir(layout.bases[0], { withFileTypes: true })).filter((entry) => entry.isDirectory()).map((entry) => entry.name);
  } catch {
    return [];
  }
}

/** v2 hands a controller to a child only when every level above enables it for its children. */
async function enableV2Controllers(base: string): Promise<void> {
  const levels = [MOUNT, path.dirname(base), base];
  for (const [index, dir] of levels.entries()) {
    if (index > 0) await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'cgroup.subtree_control'), '+memory +pids +cpu');
  }
}
