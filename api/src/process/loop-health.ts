// The event loop as a health component: a timer that measures how late it fires. A turn of the loop
// that took `blockedMs` or more makes readiness fail for `unreadySeconds` afterwards, so a load balancer
// stops sending traffic to a process that has just stalled (while it stalls it answers nothing at all;
// the watchdog thread, watchdog.ts, says where it is stuck). It is shaped as control/health's component
// (a name and a probe) without importing it: process/ sits below the features.

export interface LoopHealthSettings {
  blockedMs: number;
  unreadySeconds: number;
}

const TICK_MS = 100;

export interface EventLoopProbe {
  name: 'event_loop';
  /** Rejects while readiness should fail after a block. */
  probe(): Promise<void>;
  stop(): void;
}

export function watchEventLoop(settings: LoopHealthSettings): EventLoopProbe {
  let last = performance.now();
  let block: { ms: number; at: number } | undefined;
  const timer = setInterval(() => {
    const now = performance.now();
    const late = now - last - TICK_MS;
    last = now;
    if (late >= settings.blockedMs) block = { ms: Math.round(late), at: now };
  }, TICK_MS);
  timer.unref();
  return {
    name: 'event_loop',
    async probe() {
      const since = block && performance.now() - block.at;
      if (block && since! < settings.unreadySeconds * 1000) {
        throw new Error(`blocked for ${block.ms} ms, ${Math.round(since! / 1000)} s ago`);
      }
    },
    stop: () => clearInterval(timer),
  };
}
