// The placement lease (compute.placement 'elected'): one row in PostgreSQL names the replica that runs
// placement, its term (epoch) and when the lease ends by the database's clock. Every replica looks at the
// row five times per lease period; once it has run out, one of them takes it with the next epoch. The
// holder renews it at the same pace and stops placement the moment a renewal fails, or when its own clock
// says the lease may have run out unanswered (a stalled process or a lost database). A graceful stop
// releases it at once. The epoch fences what a holder that missed its end still tries: fence.ts refuses
// its writes, and agents refuse its commands (compute/link.ts).
//
// A row rather than a session advisory lock: a lock held by a connection that hangs (no FIN, as in a
// network partition) is released only when TCP gives up, minutes later; a row's expiry bounds the gap by
// the lease period whatever the failure, and the epoch comes with it in one statement.
import { sql, type Kysely } from 'kysely';
import type { Logger } from '../../logger.ts';
import type { Database } from '../../store/schema.ts';

const ROLE = 'placement';

export interface LeaseView {
  holder: string;
  /** Where the other replicas reach the holder. */
  address: string;
  epoch: number;
  /** Not yet run out by the database's clock. */
  live: boolean;
}

export function createLeaseRepo(db: Kysely<Database>) {
  const ttl = (ms: number) => sql`now() + ${ms} * interval '1 millisecond'`;
  return {
    async current(): Promise<LeaseView | undefined> {
      const { rows } = await sql<LeaseView>`
        SELECT holder, address, epoch, expires_at > now() AS live FROM placement_lease WHERE name = ${ROLE}`.execute(db);
      return rows[0];
    },
    /** Takes the lease if it is free (never held, or run out): the new epoch, else undefined. */
    async acquire(holder: string, address: string, leaseMs: number): Promise<number | undefined> {
      const { rows } = await sql<{ epoch: number }>`
        INSERT INTO placement_lease (name, holder, address, epoch, expires_at) VALUES (${ROLE}, ${holder}, ${address}, 1, ${ttl(leaseMs)})
        ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, address = excluded.address, epoch = placement_lease.epoch + 1, expires_at = excluded.expires_at
        WHERE placement_lease.expires_at <= now()
        RETURNING epoch`.execute(db);
      return rows[0]?.epoch;
    },
    /** Extends the lease of this term; false when another term has begun. */
    async renew(holder: string, epoch: number, leaseMs: number): Promise<boolean> {
      const { rows } = await sql`
        UPDATE placement_lease SET expires_at = ${ttl(leaseMs)} WHERE name = ${ROLE} AND holder = ${holder} AND epoch = ${epoch}
        RETURNING epoch`.execute(db);
      return rows.length === 1;
    },
    /** Ends this term now, so that another replica takes over at its next look. */
    async release(holder: string, epoch: number): Promise<void> {
      await sql`UPDATE placement_lease SET expires_at = now() WHERE name = ${ROLE} AND holder = ${holder} AND epoch = ${epoch}`.execute(db);
    },
  };
}

export type LeaseRepo = ReturnType<typeof createLeaseRepo>;

/** Looks per lease period: the holder renews this often, the others look for a free lease this often. */
const LOOKS_PER_LEASE = 5;

export interface ElectionOptions {
  repo: LeaseRepo;
  replicaId: string;
  leaseMs: number;
  log: Logger;
}

export interface ElectionHandlers {
  /** This replica's term began: start placement (its writes carry `epoch`). */
  onHeld(epoch: number): Promise<void>;
  /** The term ended (or may have): stop placement at once. */
  onLost(): Promise<void>;
  /** After each look: the live holder's term and address, or none while the lease is free. */
  onSeen?(holder: { epoch: number; address: string } | undefined): void;
}

export class PlacementElection {
  readonly #options: ElectionOptions;
  #handlers: ElectionHandlers = { onHeld: async () => {}, onLost: async () => {} };
  /** Where the other replicas reach this one: written with the lease it takes. */
  #address = '';
  readonly #lookMs: number;
  #timer: NodeJS.Timeout | undefined;
  /** Fires when the lease may have run out since the last renewal that went through. */
  #deadline: NodeJS.Timeout | undefined;
  #looking: Promise<void> = Promise.resolve();
  #epoch: number | undefined;
  #lastEpoch: number | undefined;
  /** Holding and losing, one after the other: a loss waits for the start it ends. */
  #turns: Promise<void> = Promise.resolve();
  #stopped = false;

  constructor(options: ElectionOptions) {
    this.#options = options;
    this.#lookMs = Math.max(100, Math.floor(options.leaseMs / LOOKS_PER_LEASE));
  }

  /** The epoch of this replica's term while it holds the lease (none from the moment it may have lost it). */
  get epoch(): number | undefined {
    return this.#epoch;
  }

  /** The epoch of the last term this replica held: what it stamps on commands, even late ones. */
  get lastEpoch(): number | undefined {
    return this.#lastEpoch;
  }

  start(handlers: ElectionHandlers, address: string): void {
    this.#handlers = handlers;
    this.#address = address;
    this.#timer = setInterval(() => this.#look(), this.#lookMs);
    this.#timer.unref();
    this.#look();
  }

  /** Stops looking; a holder ends its term and releases the lease, so another takes over at once. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    await this.#looking;
    const epoch = this.#epoch;
    if (epoch === undefined) return;
    await this.#lose('this replica is stopping');
    await this.#options.repo.release(this.#options.replicaId, epoch)
      .catch((error) => this.#options.log.warn({ err: error }, 'could not release the placement lease; it runs out by itself'));
  }

  /** Looks now rather than at the next tick (another replica just released the lease). */
  lookNow(): void {
    if (!this.#stopped && this.#epoch === undefined) this.#look();
  }

  #look(): void {
    this.#looking = this.#looking.then(() => (this.#stopped ? undefined : this.#lookOnce())).catch((error) => {
      this.#options.log.warn({ err: error }, 'could not look at the placement lease');
      if (this.#epoch !== undefined) return this.#lose('the placement lease could not be renewed');
    });
  }

  async #lookOnce(): Promise<void> {
    const { repo, replicaId, leaseMs } = this.#options;
    const address = this.#address;
    const sentAt = Date.now();
    if (this.#epoch !== undefined) {
      if (!await repo.renew(replicaId, this.#epoch, leaseMs)) return this.#lose('another replica holds the placement lease');
      this.#arm(sentAt);
      return this.#handlers.onSeen?.({ epoch: this.#epoch, address });
    }
    const seen = await repo.current();
    if (seen?.live) return this.#handlers.onSeen?.(seen);
    const epoch = await repo.acquire(replicaId, address, leaseMs);
    if (epoch === undefined) return this.#handlers.onSeen?.(undefined);
    this.#epoch = this.#lastEpoch = epoch;
    this.#arm(sentAt);
    this.#options.log.info({ epoch, replicaId }, 'this replica holds the placement lease: placement starts here');
    this.#turns = this.#turns.then(() => {
      const held = this.#handlers.onHeld(epoch);
      // After onHeld has begun (and subscribed to what this term is told): this replica's own edge may relay at once.
      this.#handlers.onSeen?.({ epoch, address });
      return held;
    }).catch((error) => {
      this.#options.log.error({ err: error, epoch }, 'placement could not start; the lease is given up');
      void this.#lose('placement could not start'); // not awaited: it queues behind this very turn
    });
  }

  /** The lease runs out leaseMs after the renewal was sent at the latest: stop a look before that. */
  #arm(sentAt: number): void {
    clearTimeout(this.#deadline);
    this.#deadline = setTimeout(() => void this.#lose('the placement lease was not renewed in time'), sentAt + this.#options.leaseMs - this.#lookMs - Date.now());
  }

  #lose(reason: string): Promise<void> {
    clearTimeout(this.#deadline);
    if (this.#epoch === undefined) return this.#turns;
    this.#options.log.warn({ epoch: this.#epoch, reason }, 'placement stops here: the lease is lost');
    this.#epoch = undefined;
    this.#turns = this.#turns.then(() => this.#handlers.onLost()).catch((error) => this.#options.log.error({ err: error }, 'placement did not stop cleanly'));
    return this.#turns;
  }
}
