// Durable results: from its 202 on, a request lives in the store until its result is collected or
// expires, and survives a restart (at-most-once: a request that was running when the platform stopped
// ends 502, it is never run twice).
import type { Logger } from '../logger.ts';
import { Invocation, problemResult, type BodyWriter, type ResponseHeaders, type StoredResult } from './invocation.ts';
import type { DurableRecord, InvocationsRepo } from './repo.ts';

export const RESTARTED = 'The platform restarted while the request was running; it was not retried (at-most-once execution)';
export const REPLICA_GONE = 'The API replica running the request stopped; it was not retried (at-most-once execution)';
export const KEEPER_GONE = 'The node keeping the answer of the request (its API replica had stopped) stopped too; it was not retried (at-most-once execution)';

export class DurableResults {
  readonly #repo: InvocationsRepo;
  readonly #log: Logger;
  readonly #now: () => Date;
  /** Running requests of replicas found gone at the last look that no node's keeper had taken. */
  #goneRunning = new Set<string>();

  constructor(options: { repo: InvocationsRepo; log: Logger; now: () => Date }) {
    this.#repo = options.repo;
    this.#log = options.log;
    this.#now = options.now;
  }

  /** The 202: the request is written before its client is told. */
  persist(invocation: Invocation, replica?: string): Promise<void> {
    const { body, ...request } = invocation.request;
    const stored = this.#repo.insert({
      requestId: invocation.id, state: invocation.state, body,
      request: { ...request, subject: invocation.subject, target: invocation.target, replica },
    }, this.#at());
    invocation.persisted(stored);
    return stored;
  }

  /**
   * Marks it running before it can reach its instance, so a restart never runs it a second time; false
   * when another replica claimed it first (it adopted the request when this one seemed gone).
   */
  async claim(invocation: Invocation): Promise<boolean> {
    if (invocation.claimed) return true;
    await invocation.stored;
    if (await this.#repo.claim(invocation.id, this.#at())) invocation.claim();
    return invocation.claimed;
  }

  /** A 202'd request moved to another version while it waited: a restart or another replica queues it there. */
  async retarget(invocation: Invocation): Promise<void> {
    await invocation.stored;
    await this.#repo.retarget(invocation.id, invocation.target, this.#at());
  }

  find(requestId: string): Promise<DurableRecord | undefined> {
    return this.#repo.find(requestId);
  }

  /** Takes the finished result out of the store: true for the one caller that returns it. */
  collect(requestId: string): Promise<boolean> {
    return this.#repo.collect(requestId);
  }

  /**
   * Requests of replicas no longer alive: queued ones are handed to `self`, which queues them again (a
   * conditional update: one replica gets each); running ones are left to the node whose result keeper
   * finishes them while that node is `live`, and those no node took by the next look end 502 (they are
   * never run twice).
   */
  async takeOverFrom(self: string, alive: (replica: string) => Promise<boolean>, live: (nodeId: string) => Promise<boolean>): Promise<{ ended: string[]; adopted: Invocation[] }> {
    const out = { ended: [] as string[], adopted: [] as Invocation[] };
    const unkept = new Set<string>();
    const verdicts = new Map<string, Promise<boolean>>();
    const judged = (id: string, judge: (id: string) => Promise<boolean>) => {
      if (!verdicts.has(id)) verdicts.set(id, judge(id));
      return verdicts.get(id)!;
    };
    for (const record of await this.#repo.listHeld()) {
      const { replica, keeper } = record.request;
      if (keeper !== undefined) {
        if (!await judged(keeper, live)) out.ended.push(await this.#endKept(record));
        continue;
      }
      if (!replica || replica === self || await judged(replica, alive)) continue;
      if (record.state !== 'running') {
        if (await this.#repo.reassign(record.requestId, replica, self)) out.adopted.push(this.#revive(record));
      } else if (!this.#goneRunning.has(record.requestId)) {
        unkept.add(record.requestId); // its node's keeper may be about to take it: ended at the next look if not
      } else if (await this.#repo.storeRunning(record.requestId, undefined, problemResult(502, 'bad-gateway', REPLICA_GONE), this.#at())) {
        out.ended.push(record.requestId);
      }
    }
    this.#goneRunning = unkept;
    return out;
  }

  /** A running request becomes the keeping node's to finish (compute/keeper.ts); false when it is not running. */
  keep(requestId: string, nodeId: string): Promise<boolean> {
    return this.#repo.keep(requestId, nodeId);
  }

  /** The answer a node kept; false when the request is no longer that node's to finish. */
  storeKept(requestId: string, nodeId: string, result: StoredResult): Promise<boolean> {
    return this.#repo.storeRunning(requestId, nodeId, result, this.#at());
  }

  /** A node linked again: the requests it was to finish and no longer holds end 502; their ids. */
  async lostBy(nodeId: string, keeping: ReadonlySet<string>): Promise<string[]> {
    const ended: string[] = [];
    for (const record of await this.#repo.listHeld()) {
      if (record.request.keeper === nodeId && !keeping.has(record.requestId)) ended.push(await this.#endKept(record));
    }
    return ended;
  }

  /** A request its node was to finish ends 502: the node is gone, or lost it. */
  async #endKept(record: DurableRecord): Promise<string> {
    await this.storeKept(record.requestId, record.request.keeper!, problemResult(502, 'bad-gateway', KEEPER_GONE));
    return record.requestId;
  }

  async store(invocation: Invocation, result: StoredResult) {
    try {
      await invocation.stored;
      await this.#repo.storeResult(invocation.id, result, this.#at());
    } catch (error) {
      this.#log.error({ reqId: invocation.id, err: error }, 'could not store a result');
    }
  }

  /** Collected (or abandoned before its 202): gone from the store. */
  forget(invocation: Invocation) {
    if (invocation.durable) void this.#repo.delete(invocation.id).catch(() => {});
  }

  /** Drops stored results older than `cutoff` (ms since epoch). */
  sweep(cutoff: number) {
    void this.#repo.deleteOlderThan(new Date(cutoff).toISOString()).catch(() => {});
  }

  /** Every stored request as an invocation: done ones with their result, running ones ended 502. */
  async recover(): Promise<Invocation[]> {
    const { records, unreadable } = await this.#repo.listAll();
    if (unreadable.length) this.#log.error({ requestIds: unreadable }, 'stored invocations that do not decode are left in the store');
    const out: Invocation[] = [];
    for (const record of records) {
      const invocation = this.#revive(record);
      if (record.state === 'running') await this.#finish(invocation, problemResult(502, 'bad-gateway', RESTARTED));
      out.push(invocation);
    }
    return out;
  }

  async #finish(invocation: Invocation, result: StoredResult) {
    invocation.finish(result, this.#now().getTime());
    await this.store(invocation, result);
  }

  #at() {
    return this.#now().toISOString();
  }

  /** A stored request as an invocation; one with its result counts as finished now (kept the retention from here). */
  #revive(record: DurableRecord): Invocation {
    const { target, subject, replica: _replica, keeper: _keeper, ...request } = record.request;
    const finished = record.result && { result: record.result, at: this.#now().getTime() };
    return Invocation.fromStore(record.requestId, target, subject, { ...request, body: record.body }, finished);
  }
}

/**
 * Buffers a response nobody is waiting on (a 202'd request) into a result of at most `limit` bytes. Past
 * it the response goes on into `spill` (large-results.ts) when given, else the request ends 502.
 * `done(result, abort)`: `abort` when the instance must stop sending.
 */
export class ResultCollector implements BodyWriter {
  readonly #status: number;
  readonly #headers: ResponseHeaders;
  readonly #limit: number;
  readonly #done: (result: StoredResult, abort: boolean) => void;
  readonly #spill: ((held: Buffer[]) => BodyWriter) | undefined;
  #chunks: Buffer[] = [];
  #size = 0;
  #over = false;
  #spilled: BodyWriter | undefined;

  constructor(status: number, headers: ResponseHeaders, limit: number,
    done: (result: StoredResult, abort: boolean) => void, spill?: (held: Buffer[]) => BodyWriter) {
    this.#status = status;
    this.#headers = headers;
    this.#limit = limit;
    this.#done = done;
    this.#spill = spill;
  }

  data(chunk: Buffer): boolean {
    if (this.#spilled) return this.#spilled.data(chunk);
    if (this.#over) return true;
    this.#size += chunk.length;
    this.#chunks.push(chunk);
    if (this.#size <= this.#limit) return true;
    const held = this.#chunks;
    this.#chunks = [];
    if (this.#spill) {
      this.#spilled = this.#spill(held);
      return true;
    }
    this.#over = true;
    this.#done(problemResult(502, 'bad-gateway', `The response exceeded ${this.#limit} bytes, the most a polled result may hold`), true);
    return true;
  }

  end() {
    if (this.#spilled) this.#spilled.end();
    else if (!this.#over) this.#done({ status: this.#status, headers: this.#headers, body: Buffer.concat(this.#chunks) }, false);
  }

  error() {
    this.#spilled?.error();
  }

  onDrain(resume: () => void) {
    this.#spilled?.onDrain(resume);
  }
}
