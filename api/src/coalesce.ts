// Runs an async job now, or once more right after the run in progress: callers asking while it runs
// share one follow-up run instead of queueing many. A failed run is reported and the next call runs again.

export interface Coalesced {
  (): Promise<void>;
  /** The run in progress, if any (to wait for it at shutdown). */
  settled(): Promise<void>;
}

export function coalesce(job: () => Promise<void>, onError: (error: unknown) => void): Coalesced {
  let running: Promise<void> = Promise.resolve();
  let busy = false;
  let again = false;
  const run = () => {
    if (busy) {
      again = true;
      return running;
    }
    busy = true;
    running = (async () => {
      try {
        do {
          again = false;
          await job();
        } while (again);
      } catch (error) {
        onError(error);
      } finally {
        busy = false;
      }
    })();
    return running;
  };
  return Object.assign(run, { settled: () => running });
}
