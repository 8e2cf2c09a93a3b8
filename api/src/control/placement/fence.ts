// The fencing token on placement's writes (lease.ts): a write of the term `epoch` runs in a transaction
// that first reads the lease row FOR SHARE and goes on only while the row still names that epoch. The
// share lock makes a take-over (which updates the row) wait for the write in flight, so a write of an
// older term either commits before the newer term begins or is refused: it never lands after.
import { sql, type Kysely } from 'kysely';
import type { Database } from '../../store/schema.ts';

/** A write of a placement term that has ended: the replica that tried it no longer runs placement. */
export class FencedOut extends Error {
  override name = 'FencedOut';
}

/** Runs placement's writes; without a term (placement true: one process) they run as they are. */
export interface PlacementWrites {
  run<T>(write: (db: Kysely<Database>) => Promise<T>): Promise<T>;
}

export class PlacementFence implements PlacementWrites {
  readonly #db: Kysely<Database>;
  /** The term this replica's placement writes for; none while it does not hold the lease. */
  readonly #epoch: () => number | undefined;

  constructor(db: Kysely<Database>, epoch: () => number | undefined) {
    this.#db = db;
    this.#epoch = epoch;
  }

  run<T>(write: (db: Kysely<Database>) => Promise<T>): Promise<T> {
    const epoch = this.#epoch();
    if (epoch === undefined) return Promise.reject(new FencedOut('this replica does not hold the placement lease'));
    return this.#db.transaction().execute(async (trx) => {
      const { rows } = await sql<{ epoch: number }>`SELECT epoch FROM placement_lease WHERE name = 'placement' FOR SHARE`.execute(trx);
      if (rows[0]?.epoch !== epoch) throw new FencedOut(`placement term ${epoch} has ended (the lease is at ${rows[0]?.epoch ?? 'none'})`);
      return write(trx);
    });
  }
}

/** Writes outside any term. */
export function unfenced(db: Kysely<Database>): PlacementWrites {
  return { run: (write) => write(db) };
}
