// On a NATS cluster a stream or bucket whose leader was on a server that died has none for a few seconds,
// until the survivors elect one; meanwhile its requests find no responder (or a "temporarily unavailable"
// answer). Such a request was applied nowhere, so it simply goes again. One that timed out (sent to the
// dead server just before the connection moved) may have been applied: it goes again only when doing so
// twice is harmless (a read, a publish with a message id); else the caller gets a 503 to retry, not a 500.
import { setTimeout as sleep } from 'node:timers/promises';
import type { KV } from '@nats-io/kv';
import { Problem } from '../domain/problem.ts';

const NOT_APPLIED = /no ?responders|jetstream is not enabled|temporarily unavailable/i;
const TIMED_OUT = /^timeout$|TimeoutError/;

const matches = (pattern: RegExp, error: unknown) => error instanceof Error && (pattern.test(error.name) || pattern.test(error.message));

export function leaderless(error: unknown): boolean {
  return matches(NOT_APPLIED, error);
}

const failingOver = () => new Problem('service-unavailable', 'The invocation queue is failing over to another NATS server; try again in a moment', {
  headers: { 'retry-after': '2' },
});

/**
 * `operation`, again while its stream has no leader (and after a time-out when `idempotent`), for up to
 * `withinMs`; then a 503 the caller may retry. A time-out of an operation that is not idempotent is a 503 at once.
 */
export async function outlastFailover<T>(operation: () => Promise<T>, options: { idempotent?: boolean; withinMs?: number } = {}): Promise<T> {
  const { idempotent = false, withinMs = 10_000 } = options;
  const started = Date.now();
  for (let pause = 100; ; pause = Math.min(pause * 2, 1000)) {
    try {
      return await operation();
    } catch (error) {
      const timedOut = matches(TIMED_OUT, error);
      if (!leaderless(error) && !timedOut) throw error;
      if ((timedOut && !idempotent) || Date.now() - started + pause > withinMs) throw failingOver();
      await sleep(pause);
    }
  }
}

const KEY_OPERATIONS = new Set(['get', 'put', 'create', 'update', 'delete', 'purge']);

/** `kv` whose key reads and writes outlast a failover (a read also after a time-out); watches and the rest as they are. */
export function outlastingFailover(kv: KV): KV {
  return new Proxy(kv, {
    get(target, key) {
      const value: unknown = Reflect.get(target, key);
      if (typeof value !== 'function') return value;
      if (typeof key !== 'string' || !KEY_OPERATIONS.has(key)) return value.bind(target);
      return (...args: unknown[]) => outlastFailover(() => value.apply(target, args), { idempotent: key === 'get' });
    },
  });
}
