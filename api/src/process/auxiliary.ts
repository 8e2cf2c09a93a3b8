// The platform's auxiliary processes (coturn, npm start's demo proxy) never outlive it:
//
// - Each runs under a small /bin/sh watchdog, in a process group of its own. The platform holds the write
//   end of the watchdog's stdin; when the platform dies in any way (kill -9 included) the kernel closes
//   it, the watchdog reads end-of-file and sends the program SIGTERM. The watchdog exits with the
//   program's status, so a program that fails at start is seen failing.
// - A pid file per process (<dataDir>/run/<name>.json) names the group and the platform that started it.
//   At the next start a group whose platform is gone is ended before a new one starts (a watchdog that
//   was itself killed, or a program still shutting down). Linux /proc start times make sure a recycled
//   pid is never taken for it.
//
// Function instances are not auxiliary processes: the worker agent keeps and adopts them (compute/).
import { spawn, type StdioOptions } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import type { Logger } from '../logger.ts';

/** Runs "$@" and ends it when fd 0 (the platform's pipe) reaches end-of-file. */
const WATCHDOG = [
  'exec 3<&0 0</dev/null',
  '"$@" &',
  'child=$!',
  '{ read -r _ <&3; kill -TERM "$child"; } 2>/dev/null &',
  'watcher=$!',
  'wait "$child"; status=$?',
  'kill "$watcher" 2>/dev/null',
  'exit "$status"',
].join('\n');

/**
 * What a program the platform starts (an auxiliary process, a function instance) gets of the platform's
 * own environment: PATH, HOME, LANG, TZ and TMPDIR, never its settings and credentials.
 */
export function inheritedEnvironment(): Record<string, string> {
  const names = ['PATH', 'HOME', 'LANG', 'TZ', 'TMPDIR'];
  return Object.fromEntries(names.flatMap((name) => (process.env[name] === undefined ? [] : [[name, process.env[name]!]])));
}

export interface AuxiliaryOptions {
  /** Names the pid file: one process of each name per data directory. */
  name: string;
  command: string;
  args: string[];
  /** Its environment beside PATH, HOME, LANG, TZ and TMPDIR: never the platform's own, which holds its credentials. */
  env?: Record<string, string>;
  /** <dataDir>/run */
  runDir: string;
  /** Where the program's stdout and stderr go (default: discarded). */
  output?: 'inherit' | 'ignore';
  log: Logger;
}

export interface Auxiliary {
  /** Resolves when the program has ended (its exit code, or null when it was killed by a signal). */
  readonly exited: Promise<number | null>;
  /** SIGTERM to the group, SIGKILL after graceMs; resolves once no process of the group is left. */
  stop(graceMs?: number): Promise<void>;
}

/** <runDir>/<name>.json. Start times are /proc's (clock ticks since boot): a recycled pid has another. */
const pidFileSchema = z.object({
  /** The watchdog's pid = the process group id. */
  pid: z.number().int().positive(),
  started: z.string().optional(),
  /** The platform that started it. */
  owner: z.number().int().positive(),
  ownerStarted: z.string().optional(),
});

export async function startAuxiliary(options: AuxiliaryOptions): Promise<Auxiliary> {
  await reapStale(options.runDir, options.name, options.log);
  const output = options.output ?? 'ignore';
  const stdio: StdioOptions = ['pipe', output, output];
  const child = spawn('/bin/sh', ['-c', WATCHDOG, options.name, options.command, ...options.args], {
    env: { ...inheritedEnvironment(), ...options.env }, stdio, detached: true,
  });
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', reject);
  });
  const pid = child.pid!;
  const pidFile = path.join(options.runDir, `${options.name}.json`);
  mkdirSync(options.runDir, { recursive: true });
  writeFileSync(pidFile, JSON.stringify({
    pid, started: startTimeOf(pid), owner: process.pid, ownerStarted: startTimeOf(process.pid),
  } satisfies z.input<typeof pidFileSchema>));
  // Only stop() or the platform's exit closes the pipe (an error on it must not crash the platform), and
  // the open pipe does not keep the platform's event loop alive.
  child.stdin!.on('error', () => {});
  (child.stdin as Socket).unref();
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => {
    // A watchdog killed on its own leaves its program running: the group goes too, then its pid file.
    signalGroup(pid, 'SIGKILL');
    rmSync(pidFile, { force: true });
    resolve(code);
  }));
  child.unref();
  options.log.info({ name: options.name, pid }, 'auxiliary process started');
  return {
    exited,
    async stop(graceMs = 5000) {
      child.stdin!.end();
      await endGroup(pid, graceMs);
      await exited;
    },
  };
}

/** Ends the group a pid file names when the platform that started it is gone (startAuxiliary does it first). */
export async function reapStale(runDir: string, name: string, log: Logger): Promise<void> {
  const pidFile = path.join(runDir, `${name}.json`);
  let record: z.infer<typeof pidFileSchema>;
  try {
    record = pidFileSchema.parse(JSON.parse(readFileSync(pidFile, 'utf8')));
  } catch {
    return; // none, or unreadable: nothing to identify
  }
  if (record.started === undefined || startTimeOf(process.pid) === undefined) return; // no /proc: cannot tell
  const ownerAlive = startTimeOf(record.owner) === record.ownerStarted;
  if (ownerAlive && record.owner !== process.pid) return; // a live platform's; it stops its own
  // The group is ours while its leader runs with the recorded start time, or, the leader gone, while
  // members are left: Linux hands out no pid that is still some group's id.
  const leaderStarted = startTimeOf(record.pid);
  const ours = leaderStarted === undefined ? signalGroup(record.pid, 0) : leaderStarted === record.started;
  if (ours) {
    log.warn({ name, pgid: record.pid }, 'ending an auxiliary process an earlier run left behind');
    await endGroup(record.pid, 2000);
  }
  rmSync(pidFile, { force: true });
}

async function endGroup(pgid: number, graceMs: number): Promise<void> {
  signalGroup(pgid, 'SIGTERM');
  for (const deadline = Date.now() + graceMs; Date.now() < deadline;) {
    if (!signalGroup(pgid, 0)) return;
    await sleep(25);
  }
  signalGroup(pgid, 'SIGKILL');
  while (signalGroup(pgid, 0)) await sleep(25);
}

/** Signals a process group; false when no process of it is left. */
function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  if (!(pgid > 1)) return false; // -0 or -1 would signal our own group or every process
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/** The process's start time (Linux /proc, clock ticks since boot), or undefined when it is gone or unknown. */
function startTimeOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}
