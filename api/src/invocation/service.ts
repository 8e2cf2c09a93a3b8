// The invocation plane (spec 4.1 pexec, status, queues; wire-reference 5): the life of a request. It
// waits in the InvocationQueue until a slot is granted, the Dispatcher carries it to the instance, and
// the response streams into the waiting client's sink. If nothing has started within the poll window the
// client gets 202 and the request becomes durable (results.ts): it ends fulfilled or errored, never
// silently lost, and never runs twice.
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Principal } from '../http/auth.ts';
import type { FunctionLoad } from '../http/metrics.ts';
import { notFound } from '../http/problem.ts';
import type { Logger } from '../logger.ts';
import type { ReadyInstance } from '../control/instances/service.ts';
import type { ProgressReport } from '../compute/protocol.ts';
import type { Dispatcher, ExchangeOutcome } from './dispatcher.ts';
import { forwardedRequestHeaders } from './headers.ts';
import { Invocation, problemResult, type BodyWriter, type ClientSink, type Progress, type StoredResult } from './invocation.ts';
import { isShared, type Grant, type InvocationQueue, type SharedQueue } from './queue.ts';
import { ResultCollector, type DurableResults } from './results.ts';
import type { Target, VersionResolver } from './resolver.ts';

export interface InvocationOptions {
  queue: InvocationQueue;
  dispatcher: Dispatcher;
  results: DurableResults;
  resolver: VersionResolver;
  /** Placement's view of demand: a version with work never scales below one instance. */
  demand: { setDemand(versionId: string, count: number): void };
  log: Logger;
  maxResultBytes: number;
  /** How long an uncollected result of a 202'd request is kept. */
  resultRetentionMs: number;
  now?: () => Date;
}

/** Demand is reported when a version gains or loses all its work, else at most this often. */
const DEMAND_REPORT_MS = 250;
const SWEEP_MS = 60_000;
/** How often a replica looks for stored requests left running by a replica that died. */
const ORPHAN_CHECK_MS = 5_000;
const gone = (requestId: string) => notFound(`Request '${requestId}' is unknown or its result was already returned`);

export function createInvocationService(options: InvocationOptions) {
  const { queue, dispatcher, results, log } = options;
  const shared: SharedQueue | undefined = isShared(queue) ? queue : undefined;
  /** Ms since epoch; the injected clock when tests move time. */
  const clock = options.now ? () => options.now!().getTime() : Date.now;
  /** Every invocation not yet finished, and 202'd ones until collected. */
  const invocations = new Map<string, Invocation>();
  const inflight = new Map<string, number>();
  /** Every version invoked since start: the load metrics (and through them the autoscaler) read these. */
  const invoked = new Map<string, { target: Target; lastRequestAt?: number }>();
  const reported = new Map<string, { count: number; at: number }>();
  let sweeper: NodeJS.Timeout | undefined;

  function reportDemand(versionId: string) {
    const count = queue.depth(versionId) + (inflight.get(versionId) ?? 0);
    const last = reported.get(versionId);
    const at = Date.now();
    if (last && (last.count === 0) === (count === 0) && at - last.at < DEMAND_REPORT_MS) return;
    reported.set(versionId, { count, at });
    options.demand.setDemand(versionId, count);
  }

  function forget(invocation: Invocation) {
    invocations.delete(invocation.id);
    results.forget(invocation);
  }

  function detachSink(invocation: Invocation): ClientSink | undefined {
    const sink = invocation.sink;
    invocation.sink = undefined;
    clearTimeout(invocation.pollTimer);
    return sink;
  }

  async function complete(invocation: Invocation, result: StoredResult) {
    invocation.state = 'done';
    invocation.result = result;
    invocation.finishedAt = clock();
    const sink = detachSink(invocation);
    if (sink) {
      sink.result(invocation, result);
      forget(invocation);
      return;
    }
    if (invocation.durable) {
      await results.store(invocation, result);
      shared?.completed(invocation.id);
    }
    invocation.wake();
  }

  /** The response starts: to the waiting client if there is one, else into a result. */
  function started(invocation: Invocation, status: number, headers: Record<string, string | string[] | undefined>): BodyWriter {
    const sink = detachSink(invocation);
    if (sink) return sink.start(invocation, status, headers);
    return new ResultCollector(status, headers, options.maxResultBytes, (result, overflowed) => {
      void complete(invocation, result);
      if (overflowed) invocation.abort?.();
    });
  }

  function finished(invocation: Invocation, grant: Grant, outcome: ExchangeOutcome, error?: Error) {
    const versionId = invocation.versionId;
    inflight.set(versionId, (inflight.get(versionId) ?? 1) - 1);
    const failed = outcome !== 'done' && !invocation.cancelled && invocation.state !== 'done';
    grant.release(failed ? 'failed' : 'done');
    if (invocation.cancelled || (outcome === 'done' && !invocation.result)) forget(invocation);
    else if (failed && outcome === 'unreachable') {
      // The instance went away before the request reached it: it waits for the next free slot.
      invocation.state = 'queued';
      queue.requeue(invocation);
    } else if (failed) {
      log.warn({ reqId: invocation.id, code: (error as { code?: string } | undefined)?.code }, 'instance failed while running a request');
      void complete(invocation, problemResult(502, 'bad-gateway', 'The instance ended while running the request; it was not retried'));
    }
    reportDemand(versionId);
  }

  function send(invocation: Invocation, grant: Grant) {
    dispatcher.send(invocation, grant.instance, {
      started: (status, headers) => started(invocation, status, headers),
      finished: (outcome, error) => finished(invocation, grant, outcome, error),
    });
  }

  /** A slot is granted: mark it running (in the store too once durable: at-most-once), then send. */
  function run(invocation: Invocation, grant: Grant) {
    invocation.state = 'running';
    inflight.set(invocation.versionId, (inflight.get(invocation.versionId) ?? 0) + 1);
    if (!invocation.durable) return send(invocation, grant);
    const unsent = (result?: StoredResult) => {
      inflight.set(invocation.versionId, (inflight.get(invocation.versionId) ?? 1) - 1);
      grant.release('done');
      if (result) void complete(invocation, result);
    };
    results.claim(invocation).then((mine) => (mine ? send(invocation, grant) : unsent()), (error) => {
      log.error({ reqId: invocation.id, err: error }, 'could not mark a request running; it was not sent');
      unsent(problemResult(500, 'internal', 'The platform could not record the request as running; it was not sent'));
    });
  }
  queue.onGrant(run);
  queue.onInstances((versionId, instances) => dispatcher.ready(versionId, instances));

  /** The poll window passed with nothing started: the request becomes durable, then the client gets 202. */
  function pollWindowPassed(invocation: Invocation) {
    const sink = detachSink(invocation);
    if (!sink) return;
    results.persist(invocation, shared?.replicaId).then(() => sink.pending(invocation), (error) => sink.fail(error));
  }

  function resultOrTimeout(invocation: Invocation, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        invocation.waiters = invocation.waiters.filter((waiter) => waiter !== wake);
        resolve();
      }, ms);
      invocation.waiters.push(wake);
    });
  }

  /** With replicas, the store answers: any replica returns a result, exactly one returns it. */
  async function sharedStatus(queue: SharedQueue, principal: Principal, requestId: string, pollMs: number) {
    let record = await results.find(requestId);
    if (!record || record.request.target.ncaId !== principal.ncaId) throw gone(requestId);
    if (!record.result) {
      await queue.whenCompleted(requestId, pollMs);
      record = await results.find(requestId);
      if (!record) throw gone(requestId);
    }
    if (!record.result) return { pending: invocations.get(requestId) ?? { id: requestId, progress: undefined } };
    if (!await results.collect(requestId)) throw gone(requestId);
    invocations.delete(requestId);
    return { result: record.result };
  }

  /** Stored requests left running by a replica that died end 502; its queued ones are adopted at the head. */
  function watchOrphans(queue: SharedQueue) {
    return setInterval(() => {
      results.endOrphans(queue.replicaId, (replica) => queue.alive(replica))
        .then((ended) => ended.forEach((requestId) => queue.completed(requestId)))
        .catch((error) => log.warn({ err: error }, 'could not look for requests of stopped replicas'));
    }, ORPHAN_CHECK_MS);
  }

  function noteRequest(target: Target) {
    const at = clock();
    const seen = invoked.get(target.versionId);
    if (seen) seen.lastRequestAt = at;
    else invoked.set(target.versionId, { target, lastRequestAt: at });
  }

  return {
    resolve: options.resolver.resolve,

    /**
     * Queues a request whose client waits on `sink` for up to `pollMs`; 429 when its version's queue is
     * full. The sink is answered with the response, a result, or a 202.
     */
    async submit(target: Target, principal: Principal, headers: IncomingHttpHeaders, body: Buffer, sse: boolean, sink: ClientSink, pollMs: number): Promise<Invocation> {
      const invocation = new Invocation(randomUUID(), target, principal.ownerId, forwardedRequestHeaders(headers), body, sse);
      invocation.sink = sink;
      invocations.set(invocation.id, invocation);
      noteRequest(target);
      try {
        await queue.enqueue(invocation);
      } catch (error) {
        invocations.delete(invocation.id);
        throw error;
      }
      if (invocation.sink) invocation.pollTimer = setTimeout(pollWindowPassed, pollMs, invocation);
      reportDemand(target.versionId);
      return invocation;
    },

    /** The synchronous client left before its 202: a waiting request is dropped, a running one aborted. */
    async cancel(invocation: Invocation) {
      if (invocation.durable || invocation.state === 'done') return;
      invocation.cancelled = true;
      detachSink(invocation);
      if (await queue.remove(invocation)) {
        invocations.delete(invocation.id);
        reportDemand(invocation.versionId);
      } else {
        invocation.abort?.();
      }
    },

    /** GET /pexec/status/{id}: the result once (then the id is forgotten), else 202 after `pollMs`. */
    async status(principal: Principal, requestId: string, pollMs: number): Promise<{ result: StoredResult } | { pending: Pending }> {
      if (shared) return sharedStatus(shared, principal, requestId, pollMs);
      const invocation = invocations.get(requestId);
      if (!invocation || !invocation.durable || invocation.target.ncaId !== principal.ncaId) throw gone(requestId);
      if (!invocation.result) await resultOrTimeout(invocation, pollMs);
      if (!invocation.result) return { pending: invocation };
      if (!invocations.has(requestId)) throw gone(requestId);
      forget(invocation);
      return { result: invocation.result };
    },

    /** Queue position; 0 once an instance is working on it. */
    async position(principal: Principal, requestId: string) {
      const invocation = invocations.get(requestId);
      if (!invocation || invocation.target.ncaId !== principal.ncaId || invocation.state === 'done') {
        throw notFound(`Request '${requestId}' is not queued or running`);
      }
      const position = invocation.state === 'queued' ? await queue.position(invocation) : undefined;
      return { functionId: invocation.target.functionId, functionVersionId: invocation.versionId, positionInQueue: position ?? 0 };
    },

    depth: (versionId: string) => queue.depth(versionId),

    /** Queue depth, requests in flight and the latest request of every version invoked since start. */
    *load(): Iterable<FunctionLoad> {
      for (const [versionId, { target, lastRequestAt }] of invoked) {
        yield {
          ncaId: target.ncaId, functionId: target.functionId, versionId, queued: queue.depth(versionId), inflight: inflight.get(versionId) ?? 0, lastRequestAt,
        };
      }
    },

    /** Instances of a version that take requests now (from placement). */
    ready(versionId: string, instances: ReadyInstance[]) {
      queue.ready(versionId, instances);
    },

    /** A stored 202 of a replica that is gone, claimed to run here (JetStreamQueue's adopt). */
    async adopt(requestId: string): Promise<Invocation | undefined> {
      const invocation = await results.adopt(requestId);
      if (invocation) invocations.set(invocation.id, invocation);
      return invocation;
    },

    progress(report: ProgressReport) {
      const invocation = invocations.get(report.requestId);
      if (invocation) invocation.progress = { percent: Math.max(0, Math.min(100, Math.round(report.percent))), partialResponse: report.partialResponse };
    },

    /**
     * After a restart: results wait to be collected, queued requests queue again, running ones end 502.
     * With replicas, the store is shared: requests of replicas that died are taken over as they are met.
     */
    async recover() {
      if (shared) {
        sweeper = watchOrphans(shared);
        sweeper.unref();
        return;
      }
      for (const invocation of await results.recover()) {
        invocations.set(invocation.id, invocation);
        if (invocation.result) invocation.finishedAt ??= clock();
        if (invocation.state !== 'queued') continue;
        if (!invoked.has(invocation.versionId)) invoked.set(invocation.versionId, { target: invocation.target });
        try {
          await queue.enqueue(invocation);
        } catch (error) {
          log.error({ reqId: invocation.id, err: error }, 'a stored request could not queue again after the restart');
          await complete(invocation, problemResult(502, 'bad-gateway', 'The request could not queue again after the platform restarted; it was not run'));
        }
        reportDemand(invocation.versionId);
      }
      sweeper = setInterval(() => {
        const cutoff = clock() - options.resultRetentionMs;
        for (const invocation of invocations.values()) {
          if (invocation.finishedAt !== undefined && invocation.finishedAt < cutoff) invocations.delete(invocation.id);
        }
        results.sweep(cutoff);
      }, SWEEP_MS);
      sweeper.unref();
    },

    async close() {
      clearInterval(sweeper);
      for (const invocation of invocations.values()) {
        invocation.cancelled = true;
        detachSink(invocation);
        invocation.abort?.();
        invocation.wake();
      }
      await queue.close();
      await dispatcher.close();
    },
  };
}

export type InvocationService = ReturnType<typeof createInvocationService>;

/** What a 202 shows: the request id and the progress known here. */
export interface Pending {
  id: string;
  progress: Progress | undefined;
}
