// The head of one version's shared queue, on every replica that knows instances of it: a loop that tries
// for the version's head lock (head-lock.ts) and, while holding it, pulls the version's tickets through the
// durable head consumer: up to HEAD_WINDOW in order, their slot leases in one write (leases.ts), the grants
// sent together in order (replica-grants.ts), then acked. Between tries it waits for the head's entry to
// change, or for a ticket of its own replica that waited long (the holder may be gone): no message while
// the version idles.
import type { JetStreamClient, JsMsg } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { ReadyInstance } from '../control/instances/service.ts';
import type { Logger } from '../logger.ts';
import { HeadLock, type HeadEntry } from './head-lock.ts';
import type { SlotLeases } from './leases.ts';
import type { NatsNames } from './nats.ts';
import { ACK_WAIT_MS, HEAD_WINDOW, type QueueStreams } from './queue-streams.ts';
import type { ReplicaGrants } from './replica-grants.ts';
import { ticketSchema } from './tickets.ts';

/** What a version's head needs of its replica. */
export interface HeadContext {
  replicaId: string;
  js: JetStreamClient;
  names: NatsNames;
  streams: QueueStreams;
  /** The heads bucket. */
  locks: KV;
  leases: SlotLeases;
  grants: ReplicaGrants;
  log: Logger;
  /** The head's entry as the watch last showed it. */
  entry(versionId: string): HeadEntry | undefined;
  isGone(replica: string): Promise<boolean>;
  usable(versionId: string): ReadyInstance[];
  /** `count` tickets of the version left the stream (granted or dropped). */
  took(versionId: string, count: number): void;
}

export class VersionHead {
  readonly #versionId: string;
  readonly #context: HeadContext;
  readonly done: Promise<void>;
  #stopped = false;
  /** Woken while it was not waiting: its next wait ends at once. */
  #woken = false;
  /** Ends the wait for a chance at the head, while it waits. */
  #waking: (() => void) | undefined;
  /** Ends what the loop does now (a wait, or holding the head). */
  #interrupt: (() => void) | undefined;
  #lock: HeadLock | undefined;
  /** The tickets taken while holding the head, waiting for slots. */
  #held: JsMsg[] | undefined;
  /** The next hold starts with the head consumer made anew (pullAgain). */
  #pullFresh = false;
  /** Since when the holder has had no ticket to grant (undefined: it has some, or does not hold the head). */
  #emptySince: number | undefined;

  constructor(versionId: string, context: HeadContext) {
    this.#versionId = versionId;
    this.#context = context;
    this.done = this.#loop();
  }

  /** How many tickets wait here for slots; undefined when this replica does not hold the head. */
  get held(): number | undefined {
    return this.#held?.length;
  }

  /** Wakes the loop for a chance at the head (the entry changed, or a ticket waits long); kept if it is busy. */
  wake() {
    if (this.#waking) this.#waking();
    else this.#woken = true;
  }

  /** The watch showed the head's entry at `revision`: a holder that sees a later one has lost the head. */
  entryChanged(revision: number) {
    // Only a later entry: the deletion of the entry taken over may be seen after the take.
    if (this.#lock && revision > this.#lock.revision) this.#lock.lose();
    this.wake();
  }

  /**
   * The pull it has open may be lost: the connection came back (to the same server or another), or the
   * head consumer has a new leader. nats.js checks the consumer and pulls again after a reconnect, but when
   * that check fails (a cluster electing the consumer's leader) it waits up to the pull's expiry (30 s):
   * the holder lets the head go and takes it afresh at once, with the consumer made anew (the tickets it
   * held may still count as delivered to it: their naks may not have reached the consumer).
   */
  pullAgain() {
    if (!this.#held) return;
    this.#pullFresh = true;
    this.#interrupt?.();
  }

  /**
   * A ticket has waited `ms` for the head: if this holder has had nothing to grant for as long, its pull
   * was lost (made while the cluster elected the consumer's leader) and is made again.
   */
  stalled(ms: number) {
    if (this.#emptySince !== undefined && Date.now() - this.#emptySince >= ms) this.pullAgain();
  }

  /** Stops trying for the head (tickets held go back to the stream); resolves once the loop ended. */
  stop(): Promise<void> {
    this.#stopped = true;
    this.#interrupt?.();
    return this.done;
  }

  /** Tries for the head until stopped; while holding it, serves its tickets. */
  async #loop() {
    const { streams, locks, replicaId, log } = this.#context;
    const versionId = this.#versionId;
    while (!this.#stopped) {
      try {
        await streams.ensure(versionId);
        const lock = await HeadLock.take(locks, versionId, replicaId, this.#context.entry(versionId), (replica) => this.#context.isGone(replica));
        if (!lock) {
          await this.#chance();
          continue;
        }
        this.#lock = lock;
        // Not released when this fails: the next try takes the entry, still this replica's, over again.
        if (lock.tookOver || this.#pullFresh) await streams.resetHead(versionId);
        this.#pullFresh = false;
        try {
          await this.#hold(lock);
        } finally {
          this.#lock = undefined;
          await lock.release();
        }
      } catch (error) {
        if (this.#stopped) break;
        log.warn({ err: error, versionId }, 'invocation queue head failed; retrying');
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
  }

  /** Until the head's entry changes or a ticket here waited long (wake), or the loop is stopped. */
  #chance(): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        this.#waking = undefined;
        resolve();
      };
      this.#waking = done;
      this.#interrupt = done;
      if (this.#stopped || this.#woken) done();
      this.#woken = false;
    });
  }

  /** Pulls the version's tickets while this replica holds its head; what it could not grant goes back. */
  async #hold(lock: HeadLock) {
    const { js, names, leases } = this.#context;
    const versionId = this.#versionId;
    const consumer = await js.consumers.get(names.queueStream(versionId), 'head');
    const tickets = await consumer.consume({ max_messages: HEAD_WINDOW });
    const held: JsMsg[] = [];
    this.#held = held;
    this.#emptySince = Date.now();
    let arrived = () => {};
    let ended = false;
    const stop = () => {
      tickets.stop();
      arrived();
    };
    this.#interrupt = stop;
    lock.onLost(stop);
    const stopped = () => this.#stopped || lock.lost || ended;
    if (this.#stopped) stop();
    const pulling = (async () => {
      for await (const msg of tickets) {
        held.push(msg);
        this.#emptySince = undefined;
        arrived();
      }
      ended = true;
      arrived();
    })();
    // Held tickets stay this replica's while they wait for slots.
    const keepAlive = setInterval(() => held.forEach((msg) => msg.working()), ACK_WAIT_MS / 3);
    try {
      while (!stopped()) {
        if (held.length) {
          await this.#grantHeld(held, stopped);
          continue;
        }
        // Nothing held: the other replicas need no longer give way (#grantHeld says when they must).
        leases.wait(versionId, false);
        await new Promise<void>((resolve) => (arrived = resolve));
      }
    } finally {
      leases.wait(versionId, false);
      this.#held = undefined;
      this.#emptySince = undefined;
      this.#interrupt = undefined;
      clearInterval(keepAlive);
      await pulling;
      for (const msg of held.splice(0)) msg.nak();
    }
  }

  /**
   * Slots for as many held tickets as there is room, in one write; each granted in order, then all acked
   * together (one write to NATS). A ticket stays in `held` (kept alive) until acked.
   */
  async #grantHeld(held: JsMsg[], stopped: () => boolean) {
    const { leases, grants } = this.#context;
    const versionId = this.#versionId;
    // No room for every ticket held: the other replicas give way until none is held (#hold).
    const full = () => leases.wait(versionId, true);
    const taken = await leases.acquireMany(versionId, held.length, () => this.#context.usable(versionId), stopped, full) ?? [];
    const tickets = taken.map((_, index) => ticketSchema.safeParse(held[index].json()));
    const delivered = await grants.inOrder(tickets.map((ticket, index) => ticket.success && { ticket: ticket.data, lease: taken[index] }));
    await Promise.all(taken.filter((_, index) => !delivered[index]).map((lease) => leases.release(lease)));
    for (const [index, msg] of held.splice(0, tickets.length).entries()) {
      if (tickets[index].success) msg.ack();
      else msg.term('not a ticket');
    }
    if (!held.length) this.#emptySince = Date.now();
    this.#context.took(versionId, tickets.length);
  }
}
