// Grants between replicas: the head's holder sends each granted ticket's slot lease to the ticket's
// replica over NATS request/reply (signed, replica-signing.ts), in ticket order; that replica answers
// 'taken' once it counts the slot itself, or 'gone' when the request no longer waits there. A ticket
// whose replica is gone is adopted when its request is a stored 202 (at most once, by a conditional claim
// in the store), else dropped: its client went with the replica.
import type { Msg, NatsConnection, RequestError } from '@nats-io/transport-node';
import { z } from 'zod';
import type { Logger } from '../logger.ts';
import type { Invocation } from './invocation.ts';
import type { Lease, SlotLeases } from './leases.ts';
import type { NatsNames } from './nats.ts';
import { readyInstanceSchema } from './ready-set.ts';
import type { ReplicaSigner } from './replica-signing.ts';
import type { Grant } from './slots.ts';
import type { Ticket, Tickets } from './tickets.ts';

export const GRANT_TIMEOUT_MS = 2_000;
/** A replica that answers no grant in this many tries (connected but stuck) counts as gone. */
const GRANT_ATTEMPTS = 5;

const grantSchema = z.object({ id: z.string(), lease: z.object({ id: z.string(), versionId: z.string(), instance: readyInstanceSchema }) });
/** What a signature is about: a grant to one replica. */
const grantContext = (replica: string) => `grant ${replica}`;

export interface ReplicaGrantsOptions {
  nc: NatsConnection;
  names: NatsNames;
  signer: ReplicaSigner;
  replicaId: string;
  leases: SlotLeases;
  tickets: Tickets;
  log: Logger;
  /** The grant a request runs with here: it releases `lease` when done. */
  grant(lease: Lease): Grant;
  /** A stored 202 whose replica is gone, claimed to run here; undefined when it is not claimable. */
  adopt(requestId: string): Promise<Invocation | undefined>;
}

export class ReplicaGrants {
  readonly #options: ReplicaGrantsOptions;
  /** Request id → the write counting its granted slot here, until done. */
  readonly #counting = new Map<string, Promise<void>>();

  constructor(options: ReplicaGrantsOptions) {
    this.#options = options;
  }

  /**
   * Grants in ticket order without one round trip each: grants to other replicas go out together (NATS keeps
   * their order on this connection), and one of this replica's own runs once every grant before it is taken.
   * True for each ticket whose request runs with its lease.
   */
  inOrder(grants: ({ ticket: Ticket; lease: Lease } | false)[]): Promise<boolean[]> {
    let before: Promise<unknown> = Promise.resolve();
    return Promise.all(grants.map((grant) => {
      if (!grant) return false;
      const delivered = grant.ticket.replica === this.#options.replicaId
        ? before.then(() => this.#take(grant.ticket.id, grant.lease))
        : this.#deliver(grant.ticket, grant.lease);
      before = Promise.all([before, delivered]);
      return delivered;
    }));
  }

  /** Another replica holds the head and grants one of ours; a grant it did not sign is refused. */
  received(msg: Msg) {
    const { signer, replicaId, tickets, leases, log } = this.#options;
    const opened = signer.open(grantContext(replicaId), msg.string());
    const parsed = opened && grantSchema.safeParse(opened.value);
    if (!parsed?.success) {
      log.warn({ subject: msg.subject }, `a grant ${opened ? 'that does not decode' : 'not signed by a replica'}; refused`);
      return msg.respond('gone');
    }
    const { id, lease } = parsed.data;
    const again = tickets.tookWith(id, lease.id);
    if (!this.#take(id, lease)) return msg.respond('gone');
    // Counted here before the granting replica stops counting it: the slot never counts nowhere. A grant
    // asked again is answered once that write is done too.
    if (!again) {
      const counted = leases.hold(lease).catch((error: unknown) => {
        log.warn({ err: error }, 'could not write a granted slot; the next write of this replica counts it');
      }).finally(() => this.#counting.delete(id));
      this.#counting.set(id, counted);
    }
    void (this.#counting.get(id) ?? Promise.resolve()).then(() => msg.respond('taken'));
  }

  /**
   * True once the ticket's request runs with the lease on its replica (or here, adopted). A replica that
   * is slow to answer is asked again (a grant is answered the same way twice); one with no responder is gone.
   */
  async #deliver(ticket: Ticket, lease: Lease): Promise<boolean> {
    const { nc, names, signer, leases, log } = this.#options;
    const grant = signer.sign(grantContext(ticket.replica), { id: ticket.id, lease });
    for (let asked = 1; ; asked++) {
      try {
        const reply = await nc.request(names.replica(ticket.replica, 'grant'), grant, { timeout: GRANT_TIMEOUT_MS });
        if (reply.string() !== 'taken') return false;
        void leases.handOver(lease).catch((error) => log.warn({ err: error }, 'could not write a slot handed over; the next write of this replica lets it go'));
        return true;
      } catch (error) {
        if (!(error as RequestError).isNoResponders?.() && asked < GRANT_ATTEMPTS) continue;
      }
      // Its replica is gone: a stored 202 runs here (claimed at most once); a synchronous request went with it.
      const adopted = await this.#options.adopt(ticket.id).catch(() => undefined);
      adopted?.grant(this.#options.grant(lease));
      return adopted !== undefined;
    }
  }

  /** A grant for a request waiting here: it runs with the lease (a grant asked again is taken once). */
  #take(requestId: string, lease: Lease): boolean {
    const { tickets } = this.#options;
    if (tickets.tookWith(requestId, lease.id)) return true;
    const invocation = tickets.take(requestId, lease.id);
    invocation?.grant(this.#options.grant(lease));
    return invocation !== undefined;
  }
}
