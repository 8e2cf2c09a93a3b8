// Windows shared by the API replicas: one NATS KV entry per key and rate ({start, count}), written by
// compare-and-set on its revision, so two replicas never both let the last request of a window through.
// Requests for one key that arrive while a write is in flight wait and go together in the next write: one
// round trip per batch, not per request. The last entry seen is cached: a write starts from it and only a
// lost race reads the entry again; a full window refuses from the cache until it ends, with no round trip.
import type { NatsConnection } from '@nats-io/transport-node';
import { Kvm, type KV, type KvEntry } from '@nats-io/kv';
import { z } from 'zod';
import type { Logger } from '../logger.ts';
import { LONGEST_PERIOD_MS, type Rate } from './rates.ts';
import { isOpen, refusal, type Verdict, type WindowState, type Windows } from './windows.ts';

const windowSchema = z.object({ start: z.number(), count: z.number().int().nonnegative() });
/** Lost races in a row before a batch gives up (and is let through: see #giveUp). */
const ATTEMPTS = 20;
/** While NATS is unusable, one warning at most this often (each batch would log one). */
const WARN_EVERY_MS = 10_000;
const lostRace = (error: unknown) => /wrong last sequence|key exists/i.test((error as Error).message);

interface Known {
  window?: WindowState;
  /** The entry's revision; 0 when there is none (create, not update). */
  revision: number;
}

interface Counter {
  known: Known;
  waiting: { now: number; resolve(verdict: Verdict): void }[];
  writing: boolean;
  endsAt: number;
}

function decode(entry: KvEntry | null): Known {
  if (!entry || entry.operation !== 'PUT') return { revision: entry?.revision ?? 0 };
  let parsed: z.ZodSafeParseResult<WindowState>;
  try {
    parsed = windowSchema.safeParse(entry.json());
  } catch {
    return { revision: entry.revision };
  }
  return { window: parsed.data, revision: entry.revision };
}

export class NatsWindows implements Windows {
  readonly #kv: KV;
  readonly #log: Logger;
  readonly #counters = new Map<string, Counter>();
  readonly #clock: () => number;
  readonly #sweeper: NodeJS.Timeout;
  #warnedAt = Number.NEGATIVE_INFINITY;
  #unlimited = 0;

  private constructor(kv: KV, log: Logger, clock: () => number) {
    this.#kv = kv;
    this.#log = log;
    this.#clock = clock;
    // Counters of windows that ended are forgotten here; the entries themselves expire in the bucket.
    this.#sweeper = setInterval(() => {
      const now = this.#clock();
      for (const [key, counter] of this.#counters) if (!counter.writing && counter.endsAt <= now) this.#counters.delete(key);
    }, 60_000);
    this.#sweeper.unref();
  }

  /** The bucket `name` (entries live as long as the longest period after their last write). */
  static async open(nc: NatsConnection, name: string, log: Logger, clock: () => number = Date.now): Promise<NatsWindows> {
    const kv = await new Kvm(nc).create(name, { history: 1, ttl: LONGEST_PERIOD_MS });
    return new NatsWindows(kv, log, clock);
  }

  take(key: string, rate: Rate, now: number): Verdict | Promise<Verdict> {
    const id = `${key}.${rate.text}`;
    let counter = this.#counters.get(id);
    if (!counter) this.#counters.set(id, counter = { known: { revision: -1 }, waiting: [], writing: false, endsAt: 0 });
    const { window } = counter.known;
    if (isOpen(window, rate, now) && window.count >= rate.limit) return refusal(window, rate, now);
    return new Promise((resolve) => {
      counter.waiting.push({ now, resolve });
      if (!counter.writing) void this.#drain(id, counter, rate);
    });
  }

  close() {
    clearInterval(this.#sweeper);
  }

  async #drain(id: string, counter: Counter, rate: Rate) {
    counter.writing = true;
    try {
      while (counter.waiting.length > 0) await this.#write(id, counter, rate, counter.waiting.splice(0));
    } finally {
      counter.writing = false;
    }
  }

  /** Counts what the window has room for in one write; the rest of the batch is refused. */
  async #write(id: string, counter: Counter, rate: Rate, batch: Counter['waiting']) {
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      try {
        if (counter.known.revision < 0) counter.known = decode(await this.#kv.get(id));
        const now = Math.max(...batch.map((request) => request.now));
        const open = isOpen(counter.known.window, rate, now) ? counter.known.window : undefined;
        const window = open ?? { start: now, count: 0 };
        const admitted = Math.min(batch.length, Math.max(0, rate.limit - window.count));
        if (admitted > 0) {
          const next = { start: window.start, count: window.count + admitted };
          const value = JSON.stringify(next);
          const revision = counter.known.revision === 0 ? await this.#kv.create(id, value) : await this.#kv.update(id, value, counter.known.revision);
          counter.known = { window: next, revision };
          counter.endsAt = next.start + rate.periodMs;
        }
        const settled = counter.known.window ?? window;
        batch.forEach((request, index) => request.resolve(index < admitted ? { allowed: true } : refusal(settled, rate, request.now)));
        return;
      } catch (error) {
        // A lost race (another replica wrote first): read again and retry. Anything else: give up now.
        counter.known = { revision: -1 };
        if (!lostRace(error) || attempt === ATTEMPTS - 1) return this.#giveUp(batch, error);
      }
    }
  }

  /** Rate limits protect; they never stop a function: with NATS unusable the batch is let through (logged). */
  #giveUp(batch: Counter['waiting'], error: unknown) {
    this.#unlimited += batch.length;
    const now = this.#clock();
    if (now - this.#warnedAt >= WARN_EVERY_MS) {
      this.#warnedAt = now;
      this.#log.warn({ err: error, requests: this.#unlimited }, 'rate limit windows unreachable on NATS; requests let through unlimited');
      this.#unlimited = 0;
    }
    for (const request of batch) request.resolve({ allowed: true });
  }
}
