// The long-running roles (svc serve, svc agent, svc autoscaler) run with a heap cap and a watchdog, so a
// runaway ends fast instead of taking the machine (docs/configuration.md, guard.*).
//
// The cap is V8's --max-old-space-size. Unless the command line or NODE_OPTIONS already sets one, the
// process replaces its own image (execve) with the same command plus the flag: same pid, no extra
// parent process to outlive or to forward signals, and `npm start` gets the cap too.
import { startWatchdog, type WatchdogSettings } from './watchdog.ts';

const HEAP_FLAG = '--max-old-space-size';

/** The configuration's guard.* settings (config.ts) and log level, as the caller read them. */
export function guardRole(guard: WatchdogSettings & { maxHeapMb: number }, logLevel: string, env: NodeJS.ProcessEnv): void {
  const { maxHeapMb } = guard;
  const given = process.execArgv.some((arg) => arg.startsWith(HEAP_FLAG)) || (env.NODE_OPTIONS ?? '').includes(HEAP_FLAG);
  if (maxHeapMb > 0 && !given && typeof process.execve === 'function') {
    process.execve(process.execPath, [process.execPath, `${HEAP_FLAG}=${maxHeapMb}`, ...process.execArgv, ...process.argv.slice(1)],
      env as Record<string, string>);
  }
  startWatchdog(guard, logLevel);
}
