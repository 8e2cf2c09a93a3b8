// The event loop as a health component: a timer that measures how late it fires. A turn of the loop
// that took `blockedMs` or more makes readiness fail for `unreadySeconds` afterwards, so a load balancer
// stops sending traffic to a process that has just stalled (while it stalls it answers nothing at all;
// the watchdog thread, watchdog.ts, says where it is stuck).
import type { HealthComponent } from '../control/health/service.ts';

export interface LoopHealthSettings {
  blockedMs: number;
  unreadySeconds: number;
}

const TICK_MS = 100;

export function watchEventLoop(settings: LoopHealthSettings): HealthComponent & { stop(): void } {
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
