// Processes as Linux /proc shows them, for tests and benchmarks that check what a platform started.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { isAlive } from '../compute/helpers.ts';

export { isAlive };

export interface Proc {
  pid: number;
  args: string[];
}

/** Every live process below `pid`, with its command line. */
export function descendantsOf(pid: number): Proc[] {
  const parents = new Map<number, number>();
  for (const entry of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      parents.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const below = new Set([pid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [child, parent] of parents) {
      if (below.has(parent) && !below.has(child)) {
        below.add(child);
        grew = true;
      }
    }
  }
  below.delete(pid);
  return [...below].filter(isAlive).map((child) => ({ pid: child, args: commandLineOf(child) }));
}

function commandLineOf(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

/** Instance id → pid of every live instance process an agent with this state dir runs (its runtime's pid files). */
export function agentInstances(stateDir: string): Map<string, number> {
  const dir = path.join(stateDir, 'pids');
  const held = new Map<string, number>();
  if (!existsSync(dir)) return held;
  for (const file of readdirSync(dir)) {
    try {
      const { pid, instanceId } = JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as { pid: number; instanceId: string };
      if (isAlive(pid)) held.set(instanceId, pid);
    } catch {
      // written or removed meanwhile
    }
  }
  return held;
}
