// The watchdog: a thread beside the event loop that notices what the loop itself cannot. The main thread
// writes a heartbeat every 100 ms; the watchdog thread (watchdog-worker.ts) checks it and the process's
// resident memory every 250 ms. A heartbeat older than `blockedMs` is logged once with where the main
// thread is (its JavaScript stack, taken through the inspector); one older than `exitAfterSeconds`, or
// resident memory above `maxRssMb`, ends the process with SIGKILL after a last log line: a runaway dies
// fast, and a supervisor restarts it, instead of taking the machine. Both threads are unref'd.
import { Worker } from 'node:worker_threads';

export interface WatchdogSettings {
  blockedMs: number;
  /** 0: never exit because of a blocked loop. */
  exitAfterSeconds: number;
  /** 0: no bound on resident memory. */
  maxRssMb: number;
}

export interface WatchdogData extends WatchdogSettings {
  /** BigInt64Array[1]: the main thread's last heartbeat, ms since epoch. */
  heartbeat: SharedArrayBuffer;
  logLevel: string;
}

const HEARTBEAT_MS = 100;

export function startWatchdog(settings: WatchdogSettings, logLevel: string): { stop(): Promise<void> } {
  const heartbeat = new SharedArrayBuffer(8);
  const beat = new BigInt64Array(heartbeat);
  const tick = () => Atomics.store(beat, 0, BigInt(Date.now()));
  tick();
  const timer = setInterval(tick, HEARTBEAT_MS);
  timer.unref();
  const worker = new Worker(new URL('./watchdog-worker.ts', import.meta.url), {
    workerData: { ...settings, heartbeat, logLevel } satisfies WatchdogData,
    // The watchdog must not die with an ordinary heap: it is the thing that reports a full one.
    resourceLimits: { maxOldGenerationSizeMb: 64 },
  });
  worker.unref();
  return {
    async stop() {
      clearInterval(timer);
      await worker.terminate();
    },
  };
}
