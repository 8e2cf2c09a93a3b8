// The invocation plane (spec 4.1 pexec, status, queues; wire-reference 5): the life of a request. It
// waits in the InvocationQueue until a slot is granted, the Dispatcher carries it to the instance, and
// the response streams into the waiting client's sink. If nothing has started within the poll window the
// client gets 202 and the request becomes durable (results.ts): it ends fulfilled or errored, never
// silently lost, and never runs twice.
import type { Principal } from '../domain/principal.ts';
import type { FunctionLoad } from '../domain/load.ts';
import { notFound, Problem } from '../domain/problem.ts';
import type { Logger } from '../logger.ts';
import type { ReadyInstance } from '../control/instances/service.ts';
import type { ProgressReport } from '../compute/protocol.ts';
import type { Dispatcher, ExchangeOutcome } from './dispatcher.ts';
import type { LargeResults } from './large-results.ts';
import {
  Invocation, problemResult, rewrapsErrors, storedProblem, type BodyWriter, type ClientSink, type InvocationRequest, type Progress, type ResponseHeaders, type StoredResult,
} from './invocation.ts';
import { isShared, type InvocationQueue, type SharedQueue } from './queue.ts';
import type { Grant } from './slots.ts';
import { ResultCollector, type DurableResults } from './results.ts';
import { VersionLoad } from './version-load.ts';
import type { Target, VersionResolver } from './resolver.ts';

export interface InvocationOptions {
  queue: InvocationQueue;
  dispatcher: Dispatcher;
  results: DurableResults;
  resolver: VersionResolver;
  /** Placement's view of demand: a version with work never scales below one instance. */
  demand: { setDemand(versionId: string, count: number): void };
  /** Where results over maxResultBytes go (a 302 to a zip); without it they end 502. */
  largeResults?: LargeResults;
  /** Whether a node's agent still holds its lease: the 202'd requests a node keeps end 502 once it is gone. */
  nodeLive(nodeId: string): Promise<boolean>;
  /** Puts a request's input assets in the instance's SVC-ASSET-DIR (its agent fetches them) before it is sent. */
  stageAssets?(invocation: Invocation, instance: ReadyInstance): Promise<void>;
  log: Logger;
  maxResultBytes: number;
  /** How long an uncollected result of a 202'd request is kept. */
  resultRetentionMs: number;
  now?: () => Date;
}

const SWEEP_MS = 60_000;
/** How often a replica looks for stored requests left running by a replica that died. */
const ORPHAN_CHECK_MS = 5_000;
/** How often waiting requests look whether their version still takes requests (undeployed, ERROR). */
const STRANDED_CHECK_MS = 1_000;
const gone = (requestId: string) => notFound(`Request '${requestId}' is unknown or its result was already returned`);

/** The invocation plane's state: requests in flight and held results, per-version load, timers. */
export class InvocationService {
  readonly #queue: InvocationQueue;
  readonly #dispatcher: Dispatcher;
  readonly #results: DurableResults;
  readonly #log: Logger;
  readonly #options: InvocationOptions;
  readonly #shared: SharedQueue | undefined;
  /** Ms since epoch; the injected clock when tests move time. */
  readonly #clock: () => number;
  /** Every invocation not yet finished, and 202'd ones until collected. */
  readonly #invocations = new Map<string, Invocation>();
  readonly #load: VersionLoad;
  readonly #timers: NodeJS.Timeout[] = [];

  constructor(options: InvocationOptions) {
    this.#queue = options.queue;
    this.#dispatcher = options.dispatcher;
    this.#results = options.results;
    this.#log = options.log;
    this.#options = options;
    this.#shared = isShared(options.queue) ? options.queue : undefined;
    this.#clock = options.now ? () => options.now!().getTime() : Date.now;
    this.#load = new VersionLoad({ depth: (versionId) => this.#queue.depth(versionId), demand: options.demand, clock: this.#clock });
    this.#queue.onInstances((versionId, instances) => this.#dispatcher.ready(versionId, instances));
  }

  resolve(principal: Principal, functionId: string, versionId?: string): Promise<Target> {
    return this.#options.resolver.resolve(principal, functionId, versionId);
  }

  /**
   * Queues request `id` (SVC-REQID, the HTTP request's id) whose client waits on `sink` for up to `pollMs`;
   * 429 when its version's queue is full. The sink is answered with the response, a result, or a 202.
   */
  async submit(id: string, target: Target, principal: Principal, request: InvocationRequest, sink: ClientSink, pollMs: number): Promise<Invocation> {
    const invocation = new Invocation(id, target, principal.ownerId, request, sink);
    this.#invocations.set(invocation.id, invocation);
    this.#load.requested(target);
    void this.#serve(invocation);
    try {
      await this.#queue.enqueue(invocation);
    } catch (error) {
      this.#invocations.delete(invocation.id);
      throw error;
    }
    invocation.startPollWindow(pollMs, () => this.#pollWindowPassed(invocation));
    this.#load.report(target.versionId);
    return invocation;
  }

  /** The synchronous client left before its 202: a waiting request is dropped, a running one aborted. */
  async cancel(invocation: Invocation) {
    if (invocation.durable || invocation.state === 'done') return;
    invocation.cancel();
    if (await this.#queue.remove(invocation)) {
      this.#invocations.delete(invocation.id);
      this.#load.report(invocation.versionId);
    }
  }

  /** GET /pexec/status/{id}: the result once (then the id is forgotten), else 202 after `pollMs`. */
  async status(principal: Principal, requestId: string, pollMs: number): Promise<{ result: StoredResult; rewrap: boolean } | { pending: Pending }> {
    if (this.#shared) return this.#sharedStatus(this.#shared, principal, requestId, pollMs);
    const invocation = this.#invocations.get(requestId);
    if (!invocation || !invocation.durable || invocation.target.ncaId !== principal.ncaId) throw gone(requestId);
    await invocation.untilResult(pollMs);
    if (!invocation.result) return { pending: invocation };
    if (!this.#invocations.has(requestId)) throw gone(requestId);
    this.#forget(invocation);
    return { result: invocation.result, rewrap: rewrapsErrors(invocation.request) };
  }

  /** Queue position; 0 once an instance is working on it. */
  async position(principal: Principal, requestId: string) {
    const invocation = this.#invocations.get(requestId);
    if (!invocation || invocation.target.ncaId !== principal.ncaId || invocation.state === 'done') {
      throw notFound(`Request '${requestId}' is not queued or running`);
    }
    const position = invocation.state === 'queued' ? await this.#queue.position(invocation) : undefined;
    return { functionId: invocation.target.functionId, functionVersionId: invocation.versionId, positionInQueue: position ?? 0 };
  }

  depth(versionId: string): number {
    return this.#queue.depth(versionId);
  }

  /** Queue depth, requests in flight and the latest request of every version invoked since start. */
  load(): Iterable<FunctionLoad> {
    return this.#load.load();
  }

  /** Instances of a version that take requests now (from placement). */
  ready(versionId: string, instances: ReadyInstance[]) {
    this.#queue.ready(versionId, instances);
  }

  /** The versions placement still knows (after each round): a shared queue deletes what it keeps of the others. */
  retain(versionIds: ReadonlySet<string>) {
    void this.#queue.retain?.(versionIds);
  }

  progress(report: ProgressReport) {
    this.#invocations.get(report.requestId)?.reportProgress(report.percent, report.partialResponse);
  }

  /**
   * After a restart: results wait to be collected, queued requests queue again, running ones end 502.
   * With replicas the store is shared: requests of replicas that died are taken over as they are met.
   */
  async recover() {
    this.#every(STRANDED_CHECK_MS, 'could not check waiting requests against their versions', () => this.#rerouteStranded());
    const shared = this.#shared;
    if (shared) this.#every(ORPHAN_CHECK_MS, 'could not take over requests of stopped replicas', () => this.#takeOver(shared));
    else for (const invocation of await this.#results.recover()) await this.#recovered(invocation);
    this.#every(SWEEP_MS, 'could not sweep large results', () => this.#sweep());
  }

  async close() {
    for (const timer of this.#timers) clearInterval(timer);
    for (const invocation of this.#invocations.values()) invocation.shutDown();
    await this.#queue.close();
    await this.#dispatcher.close();
  }

  /**
   * Runs the request once the queue grants it a slot. Started before the request is queued: a slot granted
   * at once then counts as in flight before the queue returns (the demand reported next includes it).
   */
  async #serve(invocation: Invocation) {
    const grant = await invocation.granted();
    try {
      this.#run(invocation, grant);
    } catch (error) {
      this.#log.error({ reqId: invocation.id, err: error }, 'a request granted a slot could not be run');
    }
  }

  /**
   * A slot is granted: mark it running in the store once durable (at-most-once), put its assets in place,
   * then send. What fails before the send gives the slot back and ends the request.
   */
  #run(invocation: Invocation, grant: Grant) {
    this.#load.started(invocation.versionId);
    if (!invocation.durable && !invocation.request.assets?.length) return this.#send(invocation, grant);
    const unsent = (result?: StoredResult) => {
      this.#load.ended(invocation.versionId);
      grant.release('done');
      if (result) void this.#complete(invocation, result);
    };
    this.#prepare(invocation, grant.instance).then((mine) => (mine ? this.#send(invocation, grant) : unsent()), (failure: Failure) => {
      this.#log.error({ reqId: invocation.id, err: failure.error }, `${failure.what}; the request was not sent`);
      unsent(problemResult(500, 'internal', `${failure.what}; the request was not sent`));
    });
  }

  /** False when another replica claimed the stored request first (it runs there). */
  async #prepare(invocation: Invocation, instance: ReadyInstance): Promise<boolean> {
    if (invocation.durable) {
      let mine: boolean;
      try {
        mine = await this.#results.claim(invocation);
      } catch (error) {
        throw new Failure('The platform could not record the request as running', error);
      }
      if (!mine) return false;
    }
    if (invocation.request.assets?.length) {
      if (!this.#options.stageAssets) throw new Failure('This API replica cannot put input assets in place (it links no agents)');
      try {
        await this.#options.stageAssets(invocation, instance);
      } catch (error) {
        throw new Failure(`The input assets could not be put in place: ${(error as Error).message}`, error);
      }
    }
    return true;
  }

  #send(invocation: Invocation, grant: Grant) {
    this.#dispatcher.send(invocation, grant.instance, {
      started: (status, headers) => this.#started(invocation, status, headers),
      finished: (outcome, error) => this.#finished(invocation, grant, outcome, error),
    });
  }

  /** The response starts: to the waiting client if there is one, else into a result. */
  #started(invocation: Invocation, status: number, headers: ResponseHeaders): BodyWriter {
    const sink = invocation.takeSink();
    if (sink) return sink.start(invocation, status, headers);
    const done = (result: StoredResult, abort: boolean) => {
      void this.#complete(invocation, result);
      if (abort) invocation.stopExchange();
    };
    // The reference zips large results, but not errors (they are rewrapped) nor host-routed responses.
    const { largeResults } = this.#options;
    const spill = largeResults && status < 400 && !invocation.request.passThrough
      ? (held: Buffer[]) => largeResults.writer(invocation.id, held, done) : undefined;
    return new ResultCollector(status, headers, this.#options.maxResultBytes, done, spill);
  }

  #finished(invocation: Invocation, grant: Grant, outcome: ExchangeOutcome, error?: Error) {
    this.#load.ended(invocation.versionId);
    const failed = outcome !== 'done' && !invocation.cancelled && invocation.state !== 'done';
    grant.release(failed ? 'failed' : 'done');
    // Done without a 202: its client has the answer. A 202'd one keeps its result (a large one arrives later).
    if (invocation.cancelled || (outcome === 'done' && !invocation.durable)) this.#forget(invocation);
    else if (failed && outcome === 'unreachable') {
      // The instance went away before the request reached it: it waits for the next free slot.
      invocation.requeue();
      void this.#serve(invocation);
      this.#queue.requeue(invocation);
    } else if (failed) {
      this.#log.warn({ reqId: invocation.id, code: (error as { code?: string } | undefined)?.code }, 'instance failed while running a request');
      void this.#complete(invocation, problemResult(502, 'bad-gateway', 'The instance ended while running the request; it was not retried'));
    }
    this.#load.report(invocation.versionId);
  }

  async #complete(invocation: Invocation, result: StoredResult) {
    invocation.finish(result, this.#clock());
    const sink = invocation.takeSink();
    if (sink) {
      sink.result(invocation, result);
      this.#forget(invocation);
      return;
    }
    if (invocation.durable) {
      await this.#results.store(invocation, result);
      this.#shared?.completed(invocation.id);
    }
  }

  /** The poll window passed with nothing started: the request becomes durable, then the client gets 202. */
  #pollWindowPassed(invocation: Invocation) {
    const sink = invocation.takeSink();
    if (!sink) return;
    this.#results.persist(invocation, this.#shared?.replicaId).then(() => sink.pending(invocation), (error) => sink.fail(error));
  }

  #forget(invocation: Invocation) {
    this.#invocations.delete(invocation.id);
    this.#results.forget(invocation);
  }

  /** One stored request after a restart, or taken over from a replica that died: queued ones wait again. */
  async #recovered(invocation: Invocation) {
    this.#invocations.set(invocation.id, invocation);
    if (invocation.state !== 'queued') return;
    this.#load.recovered(invocation.target);
    void this.#serve(invocation);
    try {
      await this.#queue.enqueue(invocation);
    } catch (error) {
      this.#log.error({ reqId: invocation.id, err: error }, 'a stored request could not queue again after the restart');
      await this.#complete(invocation, problemResult(502, 'bad-gateway', 'The request could not queue again after the platform restarted; it was not run'));
    }
    this.#load.report(invocation.versionId);
  }

  /** Runs `task` every `ms` until close, one run at a time; a run that fails is logged as `failed`. */
  #every(ms: number, failed: string, task: () => Promise<void>) {
    let running = false;
    const timer = setInterval(() => {
      if (running) return;
      running = true;
      task().catch((error) => this.#log.warn({ err: error }, failed)).finally(() => { running = false; });
    }, ms);
    timer.unref();
    this.#timers.push(timer);
  }

  /** Uncollected results older than the retention are dropped, here, in the store and in the blob store. */
  async #sweep() {
    const cutoff = this.#clock() - this.#options.resultRetentionMs;
    for (const invocation of this.#invocations.values()) {
      if (invocation.finishedAt !== undefined && invocation.finishedAt < cutoff) this.#invocations.delete(invocation.id);
    }
    this.#results.sweep(cutoff);
    await this.#options.largeResults?.sweep(cutoff);
  }

  /**
   * Requests waiting for a version that stopped taking requests (undeployed, ERROR, deleted) move to
   * another version of their function, or end with the Problem a new request would get (pinned, or none
   * left). Each replica looks after the requests it holds.
   */
  async #rerouteStranded() {
    const waiting = new Map<string, Invocation[]>();
    for (const invocation of this.#invocations.values()) {
      if (invocation.state === 'queued' && !invocation.cancelled) waiting.set(invocation.versionId, [...waiting.get(invocation.versionId) ?? [], invocation]);
    }
    for (const [versionId, invocations] of waiting) {
      const next = await this.#options.resolver.reroute(invocations[0].target).catch((problem: unknown) => {
        if (problem instanceof Problem) return problem;
        throw problem;
      });
      if (next instanceof Problem || next.versionId !== versionId) {
        for (const invocation of invocations.reverse()) await this.#move(invocation, next);
        this.#load.report(versionId);
      }
    }
  }

  /** One waiting request to `next`'s version (at the head: it waited longer), or ended with its Problem. */
  async #move(invocation: Invocation, next: Target | Problem) {
    if (!await this.#queue.remove(invocation)) return; // granted or gone meanwhile
    const from = invocation.versionId;
    if (next instanceof Problem) {
      this.#log.info({ reqId: invocation.id, versionId: from }, 'a waiting request ended: its version stopped taking requests');
      await this.#complete(invocation, storedProblem(new Problem(next.code, `${next.message}; the request waited for version '${from}' and was not run`, { headers: next.headers })));
      return;
    }
    invocation.moveTo(next);
    if (invocation.durable) await this.#results.retarget(invocation);
    this.#log.info({ reqId: invocation.id, from, to: next.versionId }, 'a waiting request moved to another version of its function');
    this.#load.requested(next);
    this.#queue.requeue(invocation);
    this.#load.report(next.versionId);
  }

  /** With replicas, the store answers: any replica returns a result, exactly one returns it. */
  async #sharedStatus(queue: SharedQueue, principal: Principal, requestId: string, pollMs: number) {
    let record = await this.#results.find(requestId);
    if (!record || record.request.target.ncaId !== principal.ncaId) throw gone(requestId);
    if (!record.result) {
      await queue.whenCompleted(requestId, pollMs);
      record = await this.#results.find(requestId);
      if (!record) throw gone(requestId);
    }
    if (!record.result) return { pending: this.#invocations.get(requestId) ?? { id: requestId, progress: undefined } };
    if (!await this.#results.collect(requestId)) throw gone(requestId);
    this.#invocations.delete(requestId);
    return { result: record.result, rewrap: rewrapsErrors(record.request) };
  }

  /**
   * Stored requests of a replica that died: queued ones queue again here (the store hands each to one
   * replica); running ones are finished by the node whose result keeper took them, or end 502 if none has
   * by the next look.
   */
  async #takeOver(queue: SharedQueue) {
    const { ended, adopted } = await this.#results.takeOverFrom(queue.replicaId, (replica) => queue.alive(replica), this.#options.nodeLive);
    for (const requestId of ended) queue.completed(requestId);
    for (const invocation of adopted) await this.#recovered(invocation);
  }
}

/** A step before the send failed: `what` is said to the client, `error` only logged. */
class Failure {
  readonly what: string;
  readonly error: unknown;

  constructor(what: string, error?: unknown) {
    this.what = what;
    this.error = error;
  }
}

/** What a 202 shows: the request id and the progress known here. */
export interface Pending {
  id: string;
  progress: Progress | undefined;
}
