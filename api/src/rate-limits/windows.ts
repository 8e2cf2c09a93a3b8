// Counting windows of a rate, as the reference's limiter (ulule/limiter) keeps them: a window opens with
// the first request that finds none open and lasts the rate's period; up to `limit` requests pass in it,
// the rest are refused until it ends. A refused request is not counted.
import type { Rate } from './rates.ts';

export type Verdict = { allowed: true } | { allowed: false; retryAfterMs: number };

/** Where windows are counted: in this process, or shared by the replicas (nats-windows.ts). */
export interface Windows {
  /** Takes one request from the window of `key` (one counter per key and rate); `now` in ms since epoch. */
  take(key: string, rate: Rate, now: number): Verdict | Promise<Verdict>;
  close(): Promise<void> | void;
}

export interface WindowState {
  /** Ms since epoch when the window opened. */
  start: number;
  count: number;
}

export const isOpen = (window: WindowState | undefined, rate: Rate, now: number): window is WindowState =>
  window !== undefined && now < window.start + rate.periodMs;

export const refusal = (window: WindowState, rate: Rate, now: number): Verdict =>
  ({ allowed: false, retryAfterMs: window.start + rate.periodMs - now });

/** How often windows that ended are forgotten. */
const SWEEP_MS = 60_000;

/** One process's windows. */
export class MemoryWindows implements Windows {
  readonly #windows = new Map<string, { window: WindowState; endsAt: number }>();
  readonly #sweeper: NodeJS.Timeout;

  constructor(clock: () => number = Date.now) {
    this.#sweeper = setInterval(() => {
      const now = clock();
      for (const [key, { endsAt }] of this.#windows) if (endsAt <= now) this.#windows.delete(key);
    }, SWEEP_MS);
    this.#sweeper.unref();
  }

  take(key: string, rate: Rate, now: number): Verdict {
    const id = `${key} ${rate.text}`;
    const known = this.#windows.get(id)?.window;
    const window = isOpen(known, rate, now) ? known : { start: now, count: 0 };
    if (window.count >= rate.limit) return refusal(window, rate, now);
    window.count++;
    this.#windows.set(id, { window, endsAt: window.start + rate.periodMs });
    return { allowed: true };
  }

  close() {
    clearInterval(this.#sweeper);
  }
}
