// Helper processes the container starts (Xvfb, the application, the capture, PulseAudio) die with it.
// Each runs in its own process group, so that stopping it also stops whatever it started (an app launched
// through a shell, a browser's helpers), and under `setpriv --pdeathsig KILL` (util-linux) where available,
// so that the kernel kills it even when this process dies without running any handler (SIGKILL, OOM).
// Every exit path of container.ts ends with killAllChildren().
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { which } from './which.ts';

const SETPRIV = which('setpriv');
const owned = new Set<ChildProcess>();

export type ChildExit = { code: number | null; signal: NodeJS.Signals | null };

/** Spawns a helper in its own process group, tied to this process's life. */
export function spawnChild(command: string, args: string[], options: SpawnOptions = {}): ChildProcess {
  const [file, argv] = SETPRIV ? [SETPRIV, ['--pdeathsig', 'KILL', '--', command, ...args]] : [command, args];
  const child = spawn(file, argv, { ...options, detached: true });
  owned.add(child);
  child.once('exit', () => owned.delete(child));
  child.once('error', () => owned.delete(child));
  return child;
}

/** Resolves when the child has exited (at once if it already has). */
export function exited(child: ChildProcess): Promise<ChildExit> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.once('error', () => resolve({ code: 127, signal: null }));
  });
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    try { child.kill(signal); } catch { /* gone */ }
  }
}

/** SIGTERM to the child's group, SIGKILL after `graceMs`; resolves once the child is gone. */
export async function stopChild(child: ChildProcess, graceMs = 1000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    signalGroup(child, 'SIGKILL'); // the leader is gone; what it started may not be
    return;
  }
  signalGroup(child, 'SIGTERM');
  const killer = setTimeout(() => signalGroup(child, 'SIGKILL'), graceMs);
  await exited(child);
  clearTimeout(killer);
  signalGroup(child, 'SIGKILL');
}

/** Synchronous last resort, safe in process.on('exit'): SIGKILL to every group still owned. */
export function killAllChildren(): void {
  for (const child of owned) signalGroup(child, 'SIGKILL');
  owned.clear();
}

process.on('exit', killAllChildren);
