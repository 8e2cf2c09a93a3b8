// The process runtime, the embedded default: an image reference resolves through the image catalog
// (image-catalog.ts) to a command, which runs as a child process on this host. Ports: free host ports per
// instance (port-contract.ts).
//
// With a sandbox (../sandbox/sandbox.ts, what the agent uses wherever the host allows it) each instance
// runs as a user of its own in namespaces of its own, on a network of its own (its endpoint is its own
// address), capped by a cgroup, which is also how it is signalled and ended. Without one it runs as the
// agent's user in a process group of its own, so that stopping it ends everything it started; the agent
// then serves only its installation's own account (docs/security.md).
//
// The child's environment is deliberately small: PATH, HOME, LANG, TZ and TMPDIR of the agent (HOME and
// TMPDIR are the sandbox's own tmpfs there), then the catalog's env, the instance's env
// (containerEnvironment, secrets, SVC_*), then the port contract. The agent's own settings and
// credentials are never inherited.
//
// cleanup() ends what an earlier run of the agent left behind: the sandbox's records name their cgroups
// and networks; for unsandboxed instances a pid file (<stateDir>/pids/<instanceId>.json) names the process
// group, and only its processes that carry SVC_INSTANCE_ID=<instanceId> in their environment (Linux /proc)
// are killed, so a recycled pid is never hit.
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../logger.ts';
import { inheritedEnvironment } from '../../process/auxiliary.ts';
import { fileNameFor, outputDirOf } from '../instance-env.ts';
import { instanceFilesOf } from '../instance-files.ts';
import { limitsOf, type LimitDefaults } from '../limits.ts';
import type { InstanceSpec, PortMap } from '../protocol.ts';
import { UnstartableError, type ExitStatus, type Runtime, type RuntimeContext, type RuntimeInstance } from '../runtime.ts';
import type { Sandbox } from '../sandbox/sandbox.ts';
import { splitArgs } from './args.ts';
import { lookUpImage, type CatalogEntry } from './image-catalog.ts';
import { LogTail } from './log-tail.ts';
import { portEnvironment, portMap, portNeeds } from './port-contract.ts';
import { TcpPortPicker, UdpPortPool } from './ports.ts';
import { z } from 'zod';

export interface ProcessRuntimeOptions {
  /** The image catalog YAML file. */
  catalogFile: string;
  /** Where pid files are kept (<stateDir>/pids). */
  stateDir: string;
  /** Address the invocation plane reaches instances at. */
  advertiseHost?: string;
  /** UDP pool for STREAMING media, inclusive. */
  udpPortRange?: [number, number];
  udpPortsPerInstance?: number;
  logTailLines?: number;
  /** Runs every instance in a sandbox of its own, capped by `limits`; without one, as the agent's user. */
  sandbox?: { sandbox: Sandbox; limits: LimitDefaults };
  log: Logger;
}

/** After the main process exits, how long its stdout/stderr may take to drain. */
const DRAIN_MS = 1000;
/** The endpoint ports of a task, which listens on nothing. */
const NO_PORTS: PortMap = { inference: 0, health: 0 };

/** What runs for an image: its catalog entry, and the command with the spec's extra arguments. */
type Image = { entry: CatalogEntry; command: string[] };

/** A started instance: its main process, where it is reached, how all of it is signalled and ended. */
interface Launched {
  child: ChildProcess;
  exit: Promise<ExitStatus>;
  host: string;
  /** Signals every process of the instance (a stop's SIGTERM, then SIGKILL). */
  signal(signal: NodeJS.Signals): void;
  /** Once it has exited: frees what it held; the reason it ended when the code does not say it. */
  ended(): Promise<string | undefined>;
}

const pidFileSchema = z.object({ pid: z.number().int().positive(), instanceId: z.string() });
type PidFile = z.infer<typeof pidFileSchema>;

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  if (!(pid > 1)) return; // -0 or -1 would signal our own group or every process
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

/**
 * The main process's exit. Like a container, whatever it left running ends with it (`killRest`); the
 * status comes once its stdout and stderr have closed, or DRAIN_MS after the exit if something holds them.
 */
function exitOf(child: ChildProcess, killRest: () => void): Promise<ExitStatus> {
  let closed = false;
  child.once('close', () => { closed = true; });
  return new Promise((resolve) => child.once('exit', (code, signal) => {
    killRest();
    const drained = () => {
      clearTimeout(timer);
      resolve({ code, signal });
    };
    const timer = setTimeout(drained, DRAIN_MS);
    if (closed) drained();
    else child.once('close', drained);
  }));
}

/** The child's stdout and stderr into <workDir>/output.log and a tail of their last lines. */
function captureOutput(child: ChildProcess, context: RuntimeContext, tailLines: number) {
  const tail = new LogTail(tailLines);
  const logFile = createWriteStream(path.join(context.workDir, 'output.log'), { flags: 'a' });
  logFile.on('error', (error) => context.log.warn({ err: error }, 'instance log file not writable'));
  for (const [name, stream] of [['stdout', child.stdout!], ['stderr', child.stderr!]] as const) {
    stream.on('data', (chunk: Buffer) => {
      tail.write(chunk);
      logFile.write(chunk);
      context.output?.(name, chunk);
    });
  }
  return {
    tail,
    close() {
      child.stdout!.destroy();
      child.stderr!.destroy();
      logFile.end();
    },
  };
}

export function createProcessRuntime(options: ProcessRuntimeOptions): Runtime {
  const advertiseHost = options.advertiseHost ?? '127.0.0.1';
  const pidDir = path.join(options.stateDir, 'pids');
  const tcpPorts = new TcpPortPicker();
  const udpPool = new UdpPortPool(options.udpPortRange ?? [47998, 48020], options.udpPortsPerInstance ?? 4);

  /** The catalog's command for the spec's image, with the spec's extra arguments; Unstartable when either is wrong. */
  async function commandOf(spec: InstanceSpec): Promise<Image> {
    if (!spec.containerImage) throw new UnstartableError('no containerImage: the process runtime runs images of its catalog');
    const entry = await lookUpImage(options.catalogFile, spec.containerImage);
    if (!entry) throw new UnstartableError(`image ${spec.containerImage} is not in the image catalog ${options.catalogFile}`);
    try {
      return { entry, command: [...entry.command, ...splitArgs(spec.containerArgs)] };
    } catch (error) {
      throw new UnstartableError((error as Error).message);
    }
  }

  /** Ports for an instance that serves (a task serves nothing: no ports, no port contract), and their release. */
  async function takePorts(spec: InstanceSpec): Promise<{ ports: PortMap; release: () => void }> {
    const held: number[] = [];
    let udpRange: [number, number] | undefined;
    const release = () => {
      tcpPorts.release(held);
      if (udpRange) udpPool.release(udpRange);
    };
    if (spec.workload === 'task') return { ports: NO_PORTS, release };
    try {
      const needs = portNeeds(spec);
      held.push(await tcpPorts.take());
      if (needs.second) held.push(await tcpPorts.take());
      if (needs.streaming) udpRange = await udpPool.take();
      return { ports: portMap(needs, held[0], held[1], udpRange), release };
    } catch (error) {
      release();
      throw error;
    }
  }

  /** The small environment described above: the agent's few, the sandbox's, the catalog's, the instance's, the ports. */
  function environmentOf(spec: InstanceSpec, context: RuntimeContext, image: Image, ports: PortMap, own: Record<string, string>) {
    return Object.assign(inheritedEnvironment(), own, image.entry.env, context.env, spec.workload === 'task' ? {} : portEnvironment(spec, ports));
  }

  /** Spawns argv in a process group of its own; an exec failure is Unstartable. */
  async function spawnChild(spec: InstanceSpec, argv: string[], options: SpawnOptions): Promise<ChildProcess> {
    const child = spawn(argv[0], argv.slice(1), { ...options, detached: true });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', (error: NodeJS.ErrnoException) =>
        reject(new UnstartableError(`cannot run ${argv[0]} for image ${spec.containerImage}: ${error.code ?? error.message}`)));
    });
    return child;
  }

  /**
   * Unsandboxed: the command as the agent's user, and its pid file. The exit is listened to at once: a
   * short-lived child (a task) can end while its pid file is being written. Without the pid file a crash
   * of the agent would orphan the group, so it does not run at all.
   */
  async function launchDirect(spec: InstanceSpec, context: RuntimeContext, image: Image, ports: PortMap): Promise<Launched> {
    const child = await spawnChild(spec, image.command, {
      cwd: image.entry.cwd, env: environmentOf(spec, context, image, ports, {}), stdio: ['ignore', 'pipe', 'pipe'],
    });
    const pid = child.pid!;
    const exit = exitOf(child, () => signalGroup(pid, 'SIGKILL'));
    const pidFile = path.join(pidDir, `${fileNameFor(spec.instanceId)}.json`);
    try {
      await mkdir(pidDir, { recursive: true });
      await writeFile(pidFile, JSON.stringify({ pid, instanceId: spec.instanceId } satisfies PidFile));
    } catch (error) {
      signalGroup(pid, 'SIGKILL');
      throw error;
    }
    return {
      child, exit, host: advertiseHost,
      signal: (signal) => signalGroup(pid, signal),
      ended: async () => {
        await rm(pidFile, { force: true }).catch(() => {});
        return undefined;
      },
    };
  }

  /**
   * Sandboxed: the same command inside the instance's sandbox. A stop's SIGTERM spares bwrap's own
   * process, which would end at once and take the instance's grace period with it.
   */
  async function launchSandboxed(spec: InstanceSpec, context: RuntimeContext, image: Image, ports: PortMap,
    { sandbox, limits }: NonNullable<ProcessRuntimeOptions['sandbox']>): Promise<Launched> {
    const limit = limitsOf(spec, limits);
    const launch = await sandbox.prepare({
      fileName: fileNameFor(spec.instanceId), command: image.command, cwd: image.entry.cwd,
      workDir: context.workDir, files: instanceFilesOf(spec, context.workDir), limits: limit,
      ports: publishedPorts(ports),
    });
    let child: ChildProcess;
    try {
      child = await spawnChild(spec, launch.argv, {
        cwd: '/', env: environmentOf(spec, context, image, ports, launch.env), stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (error) {
      await launch.release();
      throw error;
    }
    const pid = child.pid!;
    return {
      child, host: launch.host,
      exit: exitOf(child, () => void launch.signal('SIGKILL')),
      signal: (signal) => void launch.signal(signal, signal === 'SIGTERM' ? [pid] : []),
      async ended() {
        const outOfMemory = await launch.outOfMemory();
        await launch.release();
        return outOfMemory ? `killed: out of memory (limit ${Math.round(limit.memoryBytes / 2 ** 20)} MiB)` : undefined;
      },
    };
  }

  async function start(spec: InstanceSpec, context: RuntimeContext): Promise<RuntimeInstance> {
    const image = await commandOf(spec);
    const { ports, release } = await takePorts(spec);
    const launched = await (options.sandbox
      ? launchSandboxed(spec, context, image, ports, options.sandbox)
      : launchDirect(spec, context, image, ports)
    ).catch((error: unknown) => {
      release();
      throw error;
    });
    const pid = launched.child.pid!;
    const output = captureOutput(launched.child, context, options.logTailLines ?? 50);
    context.log.info({ childPid: pid, image: spec.containerImage, ...(spec.workload === 'task' ? {} : { host: launched.host, ports }) }, 'instance process started');

    let ended = false;
    const exited = launched.exit.then(async (status) => {
      ended = true;
      output.close();
      release();
      const reason = await launched.ended();
      context.log.info({ childPid: pid, ...status, reason }, 'instance process ended');
      return reason ? { ...status, reason } : status;
    });
    return {
      endpoint: { host: launched.host, ports, outputDir: outputDirOf(context.workDir) },
      exited,
      logTail: () => output.tail.lines(),
      async stop(graceMs: number) {
        if (ended) return;
        launched.signal('SIGTERM');
        const killTimer = setTimeout(() => launched.signal('SIGKILL'), graceMs);
        await exited;
        clearTimeout(killTimer);
      },
    };
  }

  async function cleanup(): Promise<void> {
    await options.sandbox?.sandbox.cleanup();
    let files: string[];
    try {
      files = (await readdir(pidDir)).filter((name) => name.endsWith('.json'));
    } catch {
      return; // no pid directory: nothing was ever started here
    }
    const killed: number[] = [];
    for (const file of files) {
      const pidPath = path.join(pidDir, file);
      try {
        const record = pidFileSchema.parse(JSON.parse(await readFile(pidPath, 'utf8')));
        for (const pid of await ourProcessesInGroup(record)) {
          try {
            process.kill(pid, 'SIGKILL');
            killed.push(pid);
          } catch {
            // already gone
          }
        }
      } catch (error) {
        options.log.warn({ err: error, file }, 'unreadable pid file skipped');
      }
      await rm(pidPath, { force: true });
    }
    if (killed.length) options.log.info({ pids: killed }, 'ended processes left by an earlier run');
    await waitUntilGone(killed);
  }

  return { name: 'process', start, cleanup, close: async () => options.sandbox?.sandbox.close() };
}

/** Processes of the recorded group that carry the instance's id in their environment (Linux). */
async function ourProcessesInGroup(record: PidFile): Promise<number[]> {
  const marker = `\0SVC_INSTANCE_ID=${record.instanceId}\0`;
  const found: number[] = [];
  let entries: string[];
  try {
    entries = (await readdir('/proc')).filter((name) => /^\d+$/.test(name));
  } catch {
    return found; // no /proc: leftovers cannot be identified safely, so none are killed
  }
  for (const entry of entries) {
    try {
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8');
      // Fields after the parenthesised command name: state, ppid, pgrp, ...
      const pgrp = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
      if (pgrp !== record.pid) continue;
      const environ = await readFile(`/proc/${entry}/environ`, 'latin1');
      if (`\0${environ}`.includes(marker)) found.push(Number(entry));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found;
}

async function waitUntilGone(pids: number[]): Promise<void> {
  for (let i = 0; i < 40; i++) {
    const alive = await Promise.all(pids.map(isAlive));
    if (!alive.includes(true)) return;
    await sleep(50);
  }
}

/** Running, i.e. neither gone nor a zombie waiting for its parent to reap it. */
async function isAlive(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** An instance's ports as the sandbox publishes them: its TCP ports, its UDP block. */
function publishedPorts(ports: PortMap): { tcp: number[]; udp: number[] } {
  const tcp = [...new Set([ports.inference, ports.health, ports.control ?? 0].filter(Boolean))];
  const udp = ports.udpRange ? Array.from({ length: ports.udpRange[1] - ports.udpRange[0] + 1 }, (_, index) => ports.udpRange![0] + index) : [];
  return { tcp, udp };
}
