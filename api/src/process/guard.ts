// The long-running roles (svc serve, svc agent, svc autoscaler) run with a heap cap and a watchdog, so a
// runaway ends fast instead of taking the machine (docs/configuration.md, guard.*), and without V8's
// allocation-site pretenuring (below).
//
// Both are V8 flags. When the command line lacks one, the process replaces its own image (execve) with the
// same command plus the flags: same pid, no extra parent process to outlive or to forward signals, and
// `npm start` gets them too. A heap cap in NODE_OPTIONS counts as given.
import { startWatchdog, type WatchdogSettings } from './watchdog.ts';

const HEAP_FLAG = '--max-old-space-size';
/**
 * V8 allocates an object literal straight in the old generation once most of its objects outlive a
 * scavenge. On a server the per-request literals then keep the young objects they point to alive until
 * the next full GC, which makes more sites look long-lived: the cost per request grows (docs/architecture.md).
 */
const NO_PRETENURING = '--no-allocation-site-pretenuring';

/** The configuration's guard.* settings (config.ts) and log level, as the caller read them. */
export function guardRole(guard: WatchdogSettings & { maxHeapMb: number }, logLevel: string, env: NodeJS.ProcessEnv): void {
  const flags = missingFlags(guard.maxHeapMb, env);
  if (flags.length && typeof process.execve === 'function') {
    process.execve(process.execPath, [process.execPath, ...flags, ...process.execArgv, ...process.argv.slice(1)], env as Record<string, string>);
  }
  startWatchdog(guard, logLevel);
}

/** The role's V8 flags that neither the command line nor NODE_OPTIONS gives. */
function missingFlags(maxHeapMb: number, env: NodeJS.ProcessEnv): string[] {
  const flags: string[] = [];
  const heapGiven = process.execArgv.some((arg) => arg.startsWith(HEAP_FLAG)) || (env.NODE_OPTIONS ?? '').includes(HEAP_FLAG);
  if (maxHeapMb > 0 && !heapGiven) flags.push(`${HEAP_FLAG}=${maxHeapMb}`);
  if (!process.execArgv.includes(NO_PRETENURING)) flags.push(NO_PRETENURING);
  return flags;
}
