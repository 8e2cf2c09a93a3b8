// Processes as Linux /proc shows them, for tests and benchmarks that check what a platform started.
import { readdirSync, readFileSync } from 'node:fs';
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
