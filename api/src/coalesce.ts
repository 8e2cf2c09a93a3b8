// Runs an async job now, or once more right after the run in progress: callers asking while it runs
// share one follow-up run instead of queueing many. A failed run is reported and the next call runs again.
//
// A follow-up starts only after the event loop has had a turn. On the synchronous SQLite driver every
// query resolves as a microtask, so a job that (directly or through listeners) asks for itself again
// would otherwise run back to back forever without letting a timer, a socket or a GC task in.
import { setImmediate as nextTurn } from 'node:timers/promises';

export interface Coalesced {
  (): Promise<void>;
  /** The run in progress, if any (to wait for it at shutdown). */
  settled(): Promise<void>;
  /** No run starts any more; resolves when the one in progress has ended. */
  stop(): Promise<void>;
}

/** Lets timers and I/O run before continuing (a long loop over store rows calls this now and then). */
export const yieldToEventLoop = (): Promise<void> => nextTurn();

export function coalesce(job: () => Promise<void>, onError: (error: unknown) => void): Coalesced {
  let running: Promise<void> = Promise.resolve();
  let busy = false;
  let again = false;
  let stopped = false;
  const run = () => {
    if (stopped) return running;
    if (busy) {
      again = true;
      return running;
    }
    busy = true;
    running = (async () => {
      try {
        do {
          if (again) await yieldToEventLoop();
          again = false;
          await job();
        } while (again && !stopped);
      } catch (error) {
        onError(error);
      } finally {
        busy = false;
      }
    })();
    return running;
  };
  const stop = () => {
    stopped = true;
    return running;
  };
  return Object.assign(run, { settled: () => running, stop });
}
