// On a NATS cluster a stream or bucket whose leader was on a server that died has none for a few seconds,
// until the survivors elect one; meanwhile its requests find no responder (or a "temporarily unavailable"
// answer). Such a request was applied nowhere, so it can simply go again; a time-out could have been
// applied, and is not retried here.
import { setTimeout as sleep } from 'node:timers/promises';
import { Problem } from '../domain/problem.ts';

const NOT_APPLIED = /no ?responders|jetstream is not enabled|temporarily unavailable/i;

export function leaderless(error: unknown): boolean {
  return error instanceof Error && (NOT_APPLIED.test(error.name) || NOT_APPLIED.test(error.message));
}

/** `operation`, again while its stream has no leader, for up to `withinMs`; then a 503 the caller may retry. */
export async function outlastFailover<T>(operation: () => Promise<T>, withinMs = 10_000): Promise<T> {
  const started = Date.now();
  for (let pause = 100; ; pause = Math.min(pause * 2, 1000)) {
    try {
      return await operation();
    } catch (error) {
      if (!leaderless(error)) throw error;
      if (Date.now() - started + pause > withinMs) {
        throw new Problem('service-unavailable', 'The invocation queue is failing over to another NATS server; try again in a moment', { headers: { 'retry-after': '2' } });
      }
      await sleep(pause);
    }
  }
}
