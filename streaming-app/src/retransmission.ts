// Which NACKed packets to send again. A receiver asks again for a packet every round trip or so until it
// arrives (Chrome up to ten times); on a congested link the first copy is often still in the
// bottleneck's queue, and answering every request fills that queue with duplicates, which are dropped
// and asked for again. Seen at a 20 → 2 Mbit/s drop: 900 packets dropped at the bottleneck over a
// second, after the estimate was already below the link. So a packet does not go again while its last
// copy may still wait in the bottleneck's queue, and while a queue builds retransmissions share a
// budget of a quarter of the target rate (as libwebrtc's retransmission rate limiter); what the budget
// refuses is better repaired by a keyframe. Without a queue every request is answered (a receiver asks
// again only when it has given the last copy its round trip: refusing those by a round trip measured on
// a busy sender, or by a few ms of jitter, nearly doubled the freezes at 5 % loss), within the whole
// target rate: the loss is chance, not congestion, and the keyframe that would repair a refused packet
// costs 15-70 packets, themselves lost at the same rate (at 10 % loss and 1.5 Mbit/s a quarter was spent
// within the first keyframe's repairs, and keyframes followed each other every 500 ms).

export type Verdict = 'send' | 'in flight' | 'over budget';

/**
 * While a queue builds, retransmissions may use at most this share of the target rate over
 * BUDGET_WINDOW_MS (with the media at the target, a link just above it still drains its queue); without
 * one, the whole target rate.
 */
const QUEUED_BUDGET_SHARE = 0.25;
const CLEAR_BUDGET_SHARE = 1;
const BUDGET_WINDOW_MS = 500;
/**
 * From this loss on a retransmission goes twice, a few ms apart: a lost copy costs the receiver another
 * request a round trip later (Chrome's default 100 ms when it has no RTT of its own), long enough for a
 * freeze; at 5 % loss one repair in twenty needed that, at 1 % one in a hundred (a few freezes a minute).
 */
const SECOND_COPY_LOSS = 0.01;
/** A queue shorter than this is the machine's and the path's jitter, not a bottleneck's backlog. */
const MIN_QUEUE_MS = 30;

/** Whether a bottleneck's queue builds: its losses are congestion, not chance. */
export const queueBuilds = (queueMs: number): boolean => queueMs >= MIN_QUEUE_MS;

export class RetransmissionGate {
  #spent: { atMs: number; bytes: number }[] = [];
  #spentBytes = 0;
  resent = 0;
  refusedInFlight = 0;
  refusedOverBudget = 0;

  /**
   * Whether a packet last sent at `lastSentMs` goes again now; counts what it lets through against the
   * budget. `queueMs` is how long the bottleneck's queue holds packets now (the estimator's view).
   */
  decide(bytes: number, lastSentMs: number, nowMs: number, queueMs: number, targetKbps: number): Verdict {
    if (queueBuilds(queueMs) && nowMs - lastSentMs < queueMs) {
      this.refusedInFlight++;
      return 'in flight';
    }
    while (this.#spent.length > 0 && this.#spent[0].atMs <= nowMs - BUDGET_WINDOW_MS) this.#spentBytes -= this.#spent.shift()!.bytes;
    if (!this.#withinBudget(bytes, queueMs, targetKbps)) {
      this.refusedOverBudget++;
      return 'over budget';
    }
    this.#charge(bytes, nowMs);
    return 'send';
  }

  /** Whether a packet just resent goes once more, at `loss` (the link's recent loss fraction); within the budget. */
  secondCopy(bytes: number, nowMs: number, queueMs: number, targetKbps: number, loss: number): boolean {
    if (loss < SECOND_COPY_LOSS || !this.#withinBudget(bytes, queueMs, targetKbps)) return false;
    this.#charge(bytes, nowMs);
    return true;
  }

  #withinBudget(bytes: number, queueMs: number, targetKbps: number): boolean {
    const share = queueBuilds(queueMs) ? QUEUED_BUDGET_SHARE : CLEAR_BUDGET_SHARE;
    return this.#spentBytes + bytes <= (share * targetKbps * BUDGET_WINDOW_MS) / 8;
  }

  #charge(bytes: number, nowMs: number): void {
    this.#spent.push({ atMs: nowMs, bytes });
    this.#spentBytes += bytes;
    this.resent++;
  }
}
