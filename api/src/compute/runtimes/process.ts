// The process runtime, the embedded default: an image reference resolves through the image catalog
// (image-catalog.ts) to a command, which runs as a child process on this host, in its own process group
// so that stopping it ends everything it started. Ports: free host ports per instance (port-contract.ts).
//
// The child's environment is deliberately small: PATH, HOME, LANG, TZ and TMPDIR of the agent, then the
// catalog's env, the instance's env (containerEnvironment, secrets, SVC_*), then the port contract. The
// agent's own settings and credentials are never inherited.
//
// A pid file per instance (<stateDir>/pids/<instanceId>.json) lets cleanup() end what an earlier run of
// the agent left behind. It kills only processes of that recorded process group that carry
// SVC_INSTANCE_ID=<instanceId> in their environment (Linux /proc), so a recycled pid is never hit.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../logger.ts';
import { fileNameFor, outputDirOf } from '../instance-env.ts';
import type { InstanceSpec, PortMap } from '../protocol.ts';
import { UnstartableError, type ExitStatus, type Runtime, type RuntimeContext, type RuntimeInstance } from '../runtime.ts';
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
  log: Logger;
}

const INHERITED_ENV = ['PATH', 'HOME', 'LANG', 'TZ', 'TMPDIR'];
/** After the main process exits, how long its stdout/stderr may take to drain. */
const DRAIN_MS = 1000;
/** The endpoint ports of a task, which listens on nothing. */
const NO_PORTS: PortMap = { inference: 0, health: 0 };

/** <stateDir>/pids/<instance>.json: the process group an earlier run started, ended at the next start. */
/** What runs for an image: its catalog entry, and the command with the spec's extra arguments. */
type Image = { entry: CatalogEntry; command: string[] };

const pidFileSchema = z.object({ pid: z.number().int().positive(), instanceId: z.string() });
type PidFile = z.infer<typeof pidFileSchema>;

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

/**
 * The main process's exit. Like a container, whatever it left running in its group ends with it; the
 * status comes once its stdout and stderr have closed, or DRAIN_MS after the exit if something holds them.
 */
function exitOf(child: ChildProcess): Promise<ExitStatus> {
  let closed = false;
  child.once('close', () => { closed = true; });
  return new Promise((resolve) => child.once('exit', (code, signal) => {
    signalGroup(child.pid!, 'SIGKILL');
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
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.on('data', (chunk: Buffer) => {
      tail.write(chunk);
      logFile.write(chunk);
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

  /** Spawns the command in a process group of its own, with the small environment described above. */
  async function spawnGroup(spec: InstanceSpec, context: RuntimeContext, image: Image, ports: PortMap): Promise<ChildProcess> {
    const { entry, command: [command, ...args] } = image;
    const env: Record<string, string> = {};
    for (const name of INHERITED_ENV) if (process.env[name] !== undefined) env[name] = process.env[name]!;
    Object.assign(env, entry.env, context.env, spec.workload === 'task' ? {} : portEnvironment(spec, ports));
    const child = spawn(command, args, { cwd: entry.cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', (error: NodeJS.ErrnoException) =>
        reject(new UnstartableError(`cannot run ${command} for image ${spec.containerImage}: ${error.code ?? error.message}`)));
    });
    return child;
  }

  /**
   * Spawns the instance and records its pid file. The exit is listened to at once: a short-lived child (a
   * task) can end while its pid file is being written. Without the pid file a crash of the agent would
   * orphan the group, so it does not run at all.
   */
  async function launch(spec: InstanceSpec, context: RuntimeContext, image: Image, ports: PortMap) {
    const child = await spawnGroup(spec, context, image, ports);
    const exit = exitOf(child);
    const pidFile = path.join(pidDir, `${fileNameFor(spec.instanceId)}.json`);
    try {
      await mkdir(pidDir, { recursive: true });
      await writeFile(pidFile, JSON.stringify({ pid: child.pid!, instanceId: spec.instanceId } satisfies PidFile));
    } catch (error) {
      signalGroup(child.pid!, 'SIGKILL');
      throw error;
    }
    return { child, exit, pidFile };
  }

  async function start(spec: InstanceSpec, context: RuntimeContext): Promise<RuntimeInstance> {
    const image = await commandOf(spec);
    const { ports, release } = await takePorts(spec);
    const { child, exit, pidFile } = await launch(spec, context, image, ports).catch((error: unknown) => {
      release();
      throw error;
    });
    const pid = child.pid!;
    const output = captureOutput(child, context, options.logTailLines ?? 50);
    context.log.info({ childPid: pid, image: spec.containerImage, ...(spec.workload === 'task' ? {} : { ports }) }, 'instance process started');

    let ended = false;
    const exited = exit.then((status) => {
      ended = true;
      output.close();
      release();
      rm(pidFile, { force: true }).catch(() => {});
      context.log.info({ childPid: pid, ...status }, 'instance process ended');
      return status;
    });
    return {
      endpoint: { host: advertiseHost, ports, outputDir: outputDirOf(context.workDir) },
      exited,
      logTail: () => output.tail.lines(),
      async stop(graceMs: number) {
        if (ended) return;
        signalGroup(pid, 'SIGTERM');
        const killTimer = setTimeout(() => signalGroup(pid, 'SIGKILL'), graceMs);
        await exited;
        clearTimeout(killTimer);
      },
    };
  }

  async function cleanup(): Promise<void> {
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

  return { name: 'process', start, cleanup };
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
