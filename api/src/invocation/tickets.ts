// This replica's requests waiting in the shared queue: a ticket {id, replica} each in its version's stream
// (queue-streams.ts), held here with the request until its grant comes, from whichever replica holds the
// version's head (replica-grants.ts).
import { z } from 'zod';
import type { Invocation } from './invocation.ts';

export const ticketSchema = z.object({ id: z.string(), replica: z.string() });
export type Ticket = z.infer<typeof ticketSchema>;

/** Grants taken, remembered so a grant asked again (its answer was lost or late) is answered the same. */
const TAKEN_REMEMBERED = 10_000;

interface Waiting {
  invocation: Invocation;
  /** The ticket's sequence in its stream; 0 until the broker acknowledged it. */
  seq: number;
  /** When it began to wait (ms since epoch). */
  since: number;
}

export class Tickets {
  /** Requests with a ticket, until granted or removed. */
  readonly #waiting = new Map<string, Waiting>();
  /** Request id → the lease it was granted with (the latest TAKEN_REMEMBERED). */
  readonly #taken = new Map<string, string>();

  /** Waits from now, before its ticket exists: its grant may come back before the broker's ack does. */
  add(invocation: Invocation): Waiting {
    const waiting = { invocation, seq: 0, since: Date.now() };
    this.#waiting.set(invocation.id, waiting);
    return waiting;
  }

  /** Whether `waiting` still waits (its grant did not come, it was not removed). */
  waits(waiting: Waiting): boolean {
    return this.#waiting.get(waiting.invocation.id) === waiting;
  }

  get(requestId: string): Waiting | undefined {
    return this.#waiting.get(requestId);
  }

  /** Takes a request out (its client left, its ticket was refused); undefined when it was not waiting. */
  remove(requestId: string): Waiting | undefined {
    const waiting = this.#waiting.get(requestId);
    this.#waiting.delete(requestId);
    return waiting;
  }

  /** Whether the grant of `requestId` with lease `leaseId` was taken already. */
  tookWith(requestId: string, leaseId: string): boolean {
    return this.#taken.get(requestId) === leaseId;
  }

  /** A grant for a waiting request: it no longer waits; undefined when it does not wait here. */
  take(requestId: string, leaseId: string): Invocation | undefined {
    const waiting = this.remove(requestId);
    if (!waiting) return undefined;
    this.#taken.set(requestId, leaseId);
    if (this.#taken.size > TAKEN_REMEMBERED) this.#taken.delete(this.#taken.keys().next().value!);
    return waiting.invocation;
  }

  /** When the longest waiting ticket of the version was made; undefined with none. */
  oldest(versionId: string): number | undefined {
    let oldest = Infinity;
    for (const { invocation, since } of this.#waiting.values()) if (invocation.versionId === versionId) oldest = Math.min(oldest, since);
    return oldest === Infinity ? undefined : oldest;
  }

  /** Whether a ticket waits for the version (for at least `ms`). */
  has(versionId: string, ms = 0): boolean {
    const oldest = this.oldest(versionId);
    return oldest !== undefined && oldest <= Date.now() - ms;
  }

  /** The versions with tickets waiting here. */
  versions(): Set<string> {
    return new Set([...this.#waiting.values()].map((waiting) => waiting.invocation.versionId));
  }
}
