// Grants between replicas: the head's holder sends each granted ticket's slot lease to the ticket's
// replica over NATS request/reply (signed, replica-signing.ts), in ticket order; that replica answers
// 'taken', or 'gone' when the request no longer waits there. A ticket whose replica is gone is adopted when
// its request is a stored 202 (at most once, by a conditional claim in the store), else dropped: its client
// went with the replica.
// The slot is lent, not handed over: the holder keeps counting it (leases.ts) and the borrower gives it back
// when its request is done (`<replica>.returned`), so a grant costs no write to the slots bucket. A borrower
// asks its lenders every LENDER_CHECK_MS whether they still answer; the slots of one found gone are counted
// by the borrower from then on (written before the lender's count lapses, GONE_GRACE_MS).
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

/** A borrower looks this often whether the replicas that lent it slots still answer. */
const LENDER_CHECK_MS = 250;

const grantSchema = z.object({
  id: z.string(), from: z.string(), lease: z.object({ id: z.string(), versionId: z.string(), instance: readyInstanceSchema }),
});
const returnSchema = z.object({ leaseId: z.string(), from: z.string() });
/** What a signature is about: a grant to one replica, or a lent slot given back to one. */
const grantContext = (replica: string) => `grant ${replica}`;
const returnContext = (replica: string) => `return ${replica}`;

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
  /** Whether a replica no longer answers (no responder on its subjects). */
  isGone(replica: string): Promise<boolean>;
}

export class ReplicaGrants {
  readonly #options: ReplicaGrantsOptions;
  /** Slots other replicas lent to requests running here: lease id → lease (its `lender` set). */
  readonly #borrowed = new Map<string, Lease>();
  #lenderCheck: NodeJS.Timeout | undefined;

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

  /** Another replica holds the head and grants one of ours (a lent slot); a grant it did not sign is refused. */
  received(msg: Msg) {
    const { signer, replicaId, log } = this.#options;
    const opened = signer.open(grantContext(replicaId), msg.string());
    const parsed = opened && grantSchema.safeParse(opened.value);
    if (!parsed?.success) {
      log.warn({ subject: msg.subject }, `a grant ${opened ? 'that does not decode' : 'not signed by a replica'}; refused`);
      return msg.respond('gone');
    }
    const { id, from, lease } = parsed.data;
    msg.respond(this.#take(id, { ...lease, lender: from }) ? 'taken' : 'gone');
  }

  /** A slot this replica lent comes back from its borrower; one not lent to the sender is ignored. */
  returned(msg: Msg) {
    const { signer, replicaId, leases, log } = this.#options;
    const parsed = returnSchema.safeParse(signer.open(returnContext(replicaId), msg.string())?.value);
    if (!parsed.success) log.warn({ subject: msg.subject }, 'a slot given back without a replica\'s signature; ignored');
    else leases.returned(parsed.data.leaseId, parsed.data.from);
    msg.respond('ok');
  }

  /**
   * A request done with a lent slot: the slot goes back to its lender (asked again while it is slow to
   * answer; a lender that is gone counted it in a record that went with it).
   */
  async giveBack(lease: Lease) {
    const { nc, names, signer, replicaId } = this.#options;
    this.#borrowed.delete(lease.id);
    const lender = lease.lender!;
    const message = signer.sign(returnContext(lender), { leaseId: lease.id, from: replicaId });
    for (let asked = 1; asked <= GRANT_ATTEMPTS; asked++) {
      try {
        await nc.request(names.replica(lender, 'returned'), message, { timeout: GRANT_TIMEOUT_MS });
        return;
      } catch (error) {
        if ((error as RequestError).isNoResponders?.()) return;
      }
    }
  }

  close() {
    clearTimeout(this.#lenderCheck);
  }

  /**
   * True once the ticket's request runs with the lease on its replica (or here, adopted). A replica that
   * is slow to answer is asked again (a grant is answered the same way twice); one with no responder is gone.
   */
  async #deliver(ticket: Ticket, lease: Lease): Promise<boolean> {
    const { nc, names, signer, leases, log } = this.#options;
    const grant = signer.sign(grantContext(ticket.replica), { id: ticket.id, from: this.#options.replicaId, lease });
    // Lent before it is sent: the borrower may give it back before its answer is read here.
    leases.lend(lease, ticket.replica);
    for (let asked = 1; ; asked++) {
      try {
        const reply = await nc.request(names.replica(ticket.replica, 'grant'), grant, { timeout: GRANT_TIMEOUT_MS });
        return reply.string() === 'taken';
      } catch (error) {
        if (!(error as RequestError).isNoResponders?.() && asked < GRANT_ATTEMPTS) continue;
      }
      // Its replica is gone: a stored 202 runs here (claimed at most once); a synchronous request went with it.
      const adopted = await this.#options.adopt(ticket.id).catch(() => undefined);
      leases.keep(lease);
      adopted?.grant(this.#options.grant(lease));
      return adopted !== undefined;
    }
  }

  /** A grant for a request waiting here: it runs with the lease (a grant asked again is taken once). */
  #take(requestId: string, lease: Lease): boolean {
    const { tickets } = this.#options;
    if (tickets.tookWith(requestId, lease.id)) return true;
    const invocation = tickets.take(requestId, lease.id);
    if (!invocation) return false;
    if (lease.lender) this.#borrow(lease);
    invocation.grant(this.#options.grant(lease));
    return true;
  }

  #borrow(lease: Lease) {
    this.#borrowed.set(lease.id, lease);
    if (!this.#lenderCheck) this.#lenderCheck = setTimeout(() => void this.#checkLenders(), LENDER_CHECK_MS);
  }

  /**
   * While slots are borrowed, their lenders are asked whether they still answer; the slots of one found
   * gone are counted here (a write) before its record stops counting them, and are this replica's own.
   */
  async #checkLenders() {
    const { leases, isGone, log } = this.#options;
    const lenders = new Set([...this.#borrowed.values()].map((lease) => lease.lender!));
    const gone = new Set((await Promise.all([...lenders].map(async (lender) => (await isGone(lender).catch(() => false)) && lender))).filter(Boolean));
    for (const lease of [...this.#borrowed.values()]) {
      if (!gone.has(lease.lender!)) continue;
      this.#borrowed.delete(lease.id);
      lease.lender = undefined;
      void leases.hold(lease).catch((error: unknown) => log.warn({ err: error }, 'could not write a slot whose lender is gone; the next write of this replica counts it'));
    }
    this.#lenderCheck = this.#borrowed.size ? setTimeout(() => void this.#checkLenders(), LENDER_CHECK_MS) : undefined;
  }
}
