// Packet pacing: a frame's packets leave spread over time at a multiple of the target rate instead of in
// one burst, so a keyframe does not overflow the bottleneck's queue (where its loss would cost another
// keyframe). The queue is kept short: when it holds more than MAX_QUEUE_MS at the pacing rate, the rate
// rises to drain it within that time, because a frame late by more than that is worth less than the link.

export type PacerOptions<P> = {
  send: (packet: P) => void;
  sizeOf: (packet: P) => number;
  /** Interval of the send loop in production; tests call process() themselves. */
  intervalMs?: number;
  /** Start the timer-driven loop (default true). */
  timer?: boolean;
  /** Clock, ms (default performance.now). */
  now?: () => number;
};

/** Pacing rate = this times the encoder's target: room for rate overshoot without building a queue. */
export const PACING_FACTOR = 2.5;
const MAX_QUEUE_MS = 150;
/** Unused budget carried over is capped at this much send time, so an idle spell does not become a burst. */
const MAX_BURST_MS = 5;

export class PacketPacer<P> {
  readonly #options: PacerOptions<P>;
  readonly #queue: P[] = [];
  #queuedBytes = 0;
  #budgetBytes = 0;
  #drainKbps = 0;
  #lastMs: number | undefined;
  #rateKbps: number;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  /** Longest time, in ms at the pacing rate, the queue held; for stats and tests. */
  maxQueueMs = 0;

  constructor(rateKbps: number, options: PacerOptions<P>) {
    this.#rateKbps = rateKbps;
    this.#options = options;
  }

  #now(): number {
    return this.#options.now ? this.#options.now() : performance.now();
  }

  get rateKbps(): number {
    return this.#rateKbps;
  }

  set rateKbps(value: number) {
    this.#rateKbps = Math.max(value, 50);
  }

  get queuedPackets(): number {
    return this.#queue.length;
  }

  /** How long the queue takes to leave at the pacing rate. */
  get queuedMs(): number {
    return (this.#queuedBytes * 8) / this.#rateKbps;
  }

  enqueue(packets: P[]): void {
    if (this.#stopped) return;
    for (const packet of packets) {
      this.#queue.push(packet);
      this.#queuedBytes += this.#options.sizeOf(packet);
    }
    this.maxQueueMs = Math.max(this.maxQueueMs, this.queuedMs);
    // Held until the queue is empty, so the whole backlog leaves within MAX_QUEUE_MS.
    this.#drainKbps = Math.max(this.#drainKbps, (this.#queuedBytes * 8) / MAX_QUEUE_MS);
    this.process(this.#now());
    if (this.#queue.length > 0 && this.#options.timer !== false) this.#startTimer();
  }

  process(nowMs: number): void {
    const elapsed = this.#lastMs === undefined ? MAX_BURST_MS : Math.max(0, nowMs - this.#lastMs);
    this.#lastMs = nowMs;
    const rate = Math.max(this.#rateKbps, this.#drainKbps);
    const perMs = rate / 8;
    this.#budgetBytes = Math.min(this.#budgetBytes + perMs * elapsed, perMs * MAX_BURST_MS);
    while (this.#queue.length > 0 && this.#budgetBytes > 0) {
      const packet = this.#queue.shift() as P;
      const size = this.#options.sizeOf(packet);
      this.#queuedBytes -= size;
      this.#budgetBytes -= size;
      this.#options.send(packet);
    }
    if (this.#queue.length > 0) return;
    this.#drainKbps = 0;
    this.#stopTimer();
  }

  #startTimer(): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => this.process(this.#now()), this.#options.intervalMs ?? 2);
  }

  #stopTimer(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  stop(): void {
    this.#stopped = true;
    this.#stopTimer();
    this.#queue.length = 0;
    this.#queuedBytes = 0;
  }
}
