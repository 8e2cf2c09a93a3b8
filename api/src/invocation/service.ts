// The invocation plane (spec 4.1 pexec, status, queues; wire-reference 5). A request waits FIFO per
// function version until an instance has a free slot (maxRequestConcurrency), then goes straight to
// the instance's inferenceUrl. The client holding the connection gets the response as it streams; if
// nothing has started within its poll window it gets 202, and from that moment the request is durable:
// it survives a restart and ends fulfilled or errored, never silently lost (at-most-once execution).
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { Pool } from 'undici';
import type { Principal } from '../http/auth.ts';
import type { FunctionLoad } from '../http/metrics.ts';
import { notFound, Problem } from '../http/problem.ts';
import type { Logger } from '../logger.ts';
import type { DeploymentsRepo } from '../control/deployments/repo.ts';
import type { FunctionsRepo } from '../control/functions/repo.ts';
import type { InstancesService, ReadyInstance } from '../control/instances/service.ts';
import type { ProgressReport } from '../compute/protocol.ts';
import { forwardedRequestHeaders } from './headers.ts';
import type { InvocationQueue } from './queue.ts';
import type { InvocationRow, InvocationsRepo } from './repo.ts';

export interface UpstreamResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Readable;
}

export interface StoredResult {
  status: number;
  headers: Record<string, string | string[]>;
  body: Buffer;
}

export interface Progress {
  percent: number;
  partialResponse?: unknown;
}

interface Target {
  ncaId: string;
  functionId: string;
  versionId: string;
  functionName: string;
  inferenceUrl: string;
}

export interface Invocation {
  id: string;
  versionId: string;
  target: Target;
  subject: string;
  headers: Record<string, string>;
  body: Buffer;
  sse: boolean;
  state: 'queued' | 'running' | 'done';
  /** Answered 202, so kept in the store until its result is collected. */
  durable: boolean;
  /** The synchronous client, handed the response the moment it starts. */
  sink?: (response: UpstreamResponse) => void;
  result?: StoredResult;
  progress?: Progress;
  waiters: Set<() => void>;
  abort?: AbortController;
  cancelled: boolean;
  /** When a result arrived (ms since epoch), for dropping results nobody collects. */
  finishedAt?: number;
}

interface KnownVersion {
  status: string;
  streaming: boolean;
  target: Target;
}

interface Slot {
  ready: ReadyInstance;
  inflight: number;
  pool: Pool;
}

export interface InvocationOptions {
  queue: InvocationQueue<Invocation>;
  repo: InvocationsRepo;
  functionsRepo: FunctionsRepo;
  deployments: DeploymentsRepo;
  instances: InstancesService;
  log: Logger;
  maxQueueDepth: number;
  maxResultBytes: number;
  /** How long an uncollected result of a 202'd request is kept. */
  resultRetentionMs: number;
  now?: () => Date;
}

const DEPLOYABLE = new Set(['ACTIVE', 'DEPLOYING', 'DEGRADING']);
/** Connect failures: the request never reached the instance, so it can safely wait for another. */
const NOT_STARTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'ENETUNREACH']);
const TARGET_CACHE_MS = 500;
const HARD_TIMEOUT_MS = 3_605_000;

export function createInvocationService(options: InvocationOptions) {
  const { queue, repo, log } = options;
  const now = options.now ?? (() => new Date());
  const slots = new Map<string, Slot[]>();
  /** Slots taken out after a failure, kept (with their in-flight counts) until placement announces them again. */
  const benched = new Map<string, Slot>();
  const pools = new Map<string, Pool>();
  /** Every invocation not yet finished, and 202'd ones until collected. */
  const invocations = new Map<string, Invocation>();
  const inflight = new Map<string, number>();
  const targets = new Map<string, { at: number; versions: KnownVersion[] }>();
  /** Every version invoked since start: the load metrics (and through them the autoscaler) read these. */
  const invoked = new Map<string, { target: Target; lastRequestAt?: number }>();
  let sweeper: NodeJS.Timeout | undefined;

  function poolFor(ready: ReadyInstance): Pool {
    const origin = `http://${ready.endpoint.host}:${ready.endpoint.ports.inference}`;
    let pool = pools.get(origin);
    if (!pool) {
      pool = new Pool(origin, { connections: Math.max(ready.maxRequestConcurrency, 1), pipelining: 1, headersTimeout: HARD_TIMEOUT_MS, bodyTimeout: HARD_TIMEOUT_MS });
      pools.set(origin, pool);
    }
    return pool;
  }

  /** Instances come and go (a streaming container lives one session); their connection pools go with them. */
  function closeUnusedPools() {
    const used = new Set([...slots.values()].flat().map((slot) => slot.pool));
    for (const [origin, pool] of pools) {
      if (!used.has(pool)) {
        pools.delete(origin);
        void pool.close().catch(() => {});
      }
    }
  }

  function reportDemand(versionId: string) {
    options.instances.setDemand(versionId, queue.depth(versionId) + (inflight.get(versionId) ?? 0));
  }

  function quarantine(versionId: string, failed: Slot) {
    const remaining = (slots.get(versionId) ?? []).filter((slot) => slot !== failed);
    if (remaining.length) slots.set(versionId, remaining);
    else slots.delete(versionId);
    benched.set(failed.ready.instanceId, failed);
  }

  /** Hands waiting requests to instances with free slots, least loaded first. */
  function pump(versionId: string) {
    const candidates = slots.get(versionId);
    while (candidates?.length && queue.depth(versionId) > 0) {
      let best: Slot | undefined;
      for (const slot of candidates) {
        if (slot.inflight < slot.ready.maxRequestConcurrency && (!best || slot.inflight < best.inflight)) best = slot;
      }
      if (!best) break;
      const invocation = queue.take(versionId);
      if (!invocation) break;
      void send(invocation, best);
    }
    reportDemand(versionId);
  }

  function containerHeaders(invocation: Invocation, slot: Slot): Record<string, string> {
    const { target } = invocation;
    const outputDir = slot.ready.endpoint.outputDir ? `${slot.ready.endpoint.outputDir}/${invocation.id}` : '';
    return {
      ...invocation.headers,
      'svc-reqid': invocation.id,
      'svc-sub': invocation.subject,
      'svc-ncaid': target.ncaId,
      'svc-function-name': target.functionName,
      'svc-function-id': target.functionId,
      'svc-function-version-id': target.versionId,
      'svc-asset-dir': outputDir ? `${outputDir}/assets` : '',
      'svc-large-output-dir': outputDir,
      'svc-max-response-size-bytes': String(options.maxResultBytes),
      'svc-backend': slot.ready.backend,
      'svc-instancetype': slot.ready.instanceType,
      'svc-region': slot.ready.region,
      'svc-env': 'svc',
    };
  }

  async function send(invocation: Invocation, slot: Slot) {
    const { versionId } = invocation;
    invocation.state = 'running';
    slot.inflight++;
    inflight.set(versionId, (inflight.get(versionId) ?? 0) + 1);
    invocation.abort = new AbortController();
    try {
      // At-most-once: a durable request is marked running before it can reach the instance, so a restart
      // never runs it a second time.
      if (invocation.durable) await repo.update(invocation.id, { state: 'running', updated_at: now().toISOString() });
      const response = await slot.pool.request({
        path: invocation.target.inferenceUrl, method: 'POST', headers: containerHeaders(invocation, slot), body: invocation.body,
        signal: invocation.abort.signal,
      });
      const upstream: UpstreamResponse = { status: response.statusCode, headers: response.headers, body: response.body };
      const sink = invocation.sink;
      if (sink) {
        invocation.sink = undefined;
        sink(upstream);
        await finished(response.body).catch(() => {});
        forget(invocation);
      } else {
        await complete(invocation, await collect(upstream));
      }
    } catch (error) {
      const code = (error as { code?: string }).code ?? '';
      // An instance that just failed a connection gets nothing more until placement announces it
      // again (its agent reports it healthy, or the next round within seconds): a dying process must
      // not take the requests queued behind.
      if (!invocation.cancelled) quarantine(versionId, slot);
      if (invocation.cancelled) {
        forget(invocation);
      } else if (NOT_STARTED.has(code)) {
        // The instance is gone before the request reached it: it waits for the next free slot.
        invocation.state = 'queued';
        queue.enqueue(invocation, { front: true });
      } else {
        log.warn({ reqId: invocation.id, code }, 'instance failed while running a request');
        await complete(invocation, problemResult(502, 'bad-gateway', 'The instance ended while running the request; it was not retried'));
      }
    } finally {
      slot.inflight--;
      inflight.set(versionId, (inflight.get(versionId) ?? 1) - 1);
      pump(versionId);
    }
  }

  async function collect(upstream: UpstreamResponse): Promise<StoredResult> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of upstream.body) {
      size += (chunk as Buffer).length;
      if (size > options.maxResultBytes) {
        upstream.body.destroy();
        return problemResult(502, 'bad-gateway', `The response exceeded ${options.maxResultBytes} bytes, the most a polled result may hold`);
      }
      chunks.push(chunk as Buffer);
    }
    const headers: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(upstream.headers)) if (value !== undefined) headers[name] = value;
    return { status: upstream.status, headers, body: Buffer.concat(chunks) };
  }

  function problemResult(status: number, code: 'bad-gateway' | 'internal', detail: string): StoredResult {
    const body = new Problem(code, detail).toBody('', '');
    return { status, headers: { 'content-type': 'application/problem+json' }, body: Buffer.from(JSON.stringify(body)) };
  }

  async function complete(invocation: Invocation, result: StoredResult) {
    invocation.state = 'done';
    invocation.result = result;
    invocation.finishedAt = now().getTime();
    if (invocation.durable) {
      await repo.update(invocation.id, {
        state: 'done', result: JSON.stringify({ status: result.status, headers: result.headers }), result_body: result.body,
        updated_at: now().toISOString(),
      }).catch((error) => log.error({ reqId: invocation.id, err: error }, 'could not store a result'));
    }
    for (const wake of invocation.waiters) wake();
  }

  function forget(invocation: Invocation) {
    invocations.delete(invocation.id);
    if (invocation.durable) void repo.delete(invocation.id).catch(() => {});
  }

  /** A function's versions as invocation needs them, read from the store at most every TARGET_CACHE_MS. */
  async function versionsOf(ncaId: string, functionId: string): Promise<KnownVersion[]> {
    const key = `${ncaId}/${functionId}`;
    const cached = targets.get(key);
    if (cached && Date.now() - cached.at < TARGET_CACHE_MS) return cached.versions;
    const versions = (await options.functionsRepo.listVersionsOf(ncaId, functionId)).map((row) => ({
      status: row.status,
      streaming: row.function_type === 'STREAMING',
      target: {
        ncaId: row.nca_id, functionId: row.function_id, versionId: row.version_id, functionName: row.name,
        inferenceUrl: (JSON.parse(row.document) as { inferenceUrl: string }).inferenceUrl,
      },
    }));
    targets.set(key, { at: Date.now(), versions });
    return versions;
  }

  return {
    /**
     * The version a request goes to: the one named, or a random deployable one. Refuses what cannot
     * take requests: unknown → 404, not deployed → 404, DEGRADED/ERROR → 503.
     */
    async resolve(principal: Principal, functionId: string, versionId?: string): Promise<Target> {
      const versions = await versionsOf(principal.ncaId, functionId);
      const named = versionId ? versions.filter((version) => version.target.versionId === versionId) : versions;
      if (named.length === 0) throw notFound(versionId ? `Function id '${functionId}', version '${versionId}': not found` : `Function id '${functionId}': not found`);
      const deployable = named.filter((version) => DEPLOYABLE.has(version.status));
      if (deployable.length === 0) {
        const status = named[0].status;
        if (status === 'INACTIVE') throw notFound(`Function id '${functionId}'${versionId ? `, version '${versionId}'` : ''}: not deployed`);
        throw new Problem('service-unavailable', `Function id '${functionId}' is ${status} and takes no requests now`, { headers: { 'retry-after': '5' } });
      }
      const chosen = deployable[Math.floor(Math.random() * deployable.length)];
      if (chosen.streaming) throw new Problem('bad-request', 'STREAMING functions are reached over a WebSocket session, not pexec');
      return chosen.target;
    },

    /** Queues a request; 429 when its version's queue is full. */
    submit(target: Target, principal: Principal, headers: IncomingHttpHeaders, body: Buffer, sse: boolean): Invocation {
      if (queue.depth(target.versionId) >= options.maxQueueDepth) {
        throw new Problem('too-many-requests', `The queue of function version '${target.versionId}' is full (${options.maxQueueDepth} waiting)`, {
          headers: { 'retry-after': '1' },
        });
      }
      const invocation: Invocation = {
        id: randomUUID(), versionId: target.versionId, target, subject: principal.ownerId, headers: forwardedRequestHeaders(headers),
        body, sse, state: 'queued', durable: false, waiters: new Set(), cancelled: false,
      };
      invocations.set(invocation.id, invocation);
      const seen = invoked.get(target.versionId);
      if (seen) seen.lastRequestAt = now().getTime();
      else invoked.set(target.versionId, { target, lastRequestAt: now().getTime() });
      queue.enqueue(invocation);
      pump(target.versionId);
      return invocation;
    },

    /**
     * Waits up to `pollMs` for the response to start. `pending` means the caller answers 202: the
     * request is made durable before this returns.
     */
    async awaitResponse(invocation: Invocation, pollMs: number): Promise<{ response: UpstreamResponse } | { result: StoredResult } | { pending: true } | { cancelled: true }> {
      const started = new Promise<UpstreamResponse>((resolve) => {
        invocation.sink = resolve;
      });
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), pollMs);
      });
      let wake = () => {};
      const done = new Promise<'done'>((resolve) => invocation.waiters.add(wake = () => resolve('done')));
      const outcome = await Promise.race([started, timedOut, done]);
      clearTimeout(timer);
      invocation.waiters.delete(wake);
      if (outcome !== 'timeout' && outcome !== 'done') return { response: outcome };
      invocation.sink = undefined;
      if (invocation.cancelled) return { cancelled: true };
      if (invocation.result) {
        forget(invocation);
        return { result: invocation.result };
      }
      invocation.durable = true;
      const at = now().toISOString();
      const row: InvocationRow = {
        request_id: invocation.id, nca_id: invocation.target.ncaId, function_id: invocation.target.functionId, version_id: invocation.versionId,
        state: invocation.state, request: JSON.stringify({ headers: invocation.headers, sse: invocation.sse, subject: invocation.subject, target: invocation.target }),
        body: invocation.body, result: null, result_body: null, created_at: at, updated_at: at,
      };
      await repo.insert(row);
      return { pending: true };
    },

    /** The synchronous client left before 202: a waiting request is dropped, a running one aborted. */
    cancel(invocation: Invocation) {
      if (invocation.durable || invocation.state === 'done') return;
      invocation.cancelled = true;
      invocation.sink = undefined;
      for (const wake of invocation.waiters) wake();
      if (queue.remove(invocation.id)) {
        invocations.delete(invocation.id);
        reportDemand(invocation.versionId);
      } else {
        invocation.abort?.abort();
      }
    },

    /** GET /pexec/status/{id}: the result once (then the id is forgotten), else 202 after `pollMs`. */
    async status(principal: Principal, requestId: string, pollMs: number): Promise<{ result: StoredResult } | { pending: Invocation }> {
      const invocation = invocations.get(requestId);
      if (!invocation || !invocation.durable || invocation.target.ncaId !== principal.ncaId) {
        throw notFound(`Request '${requestId}' is unknown or its result was already returned`);
      }
      if (!invocation.result) {
        await new Promise<void>((resolve) => {
          const wake = () => {
            clearTimeout(timer);
            invocation.waiters.delete(wake);
            resolve();
          };
          const timer = setTimeout(wake, pollMs);
          invocation.waiters.add(wake);
        });
      }
      if (!invocation.result) return { pending: invocation };
      if (!invocations.has(requestId)) throw notFound(`Request '${requestId}' is unknown or its result was already returned`);
      forget(invocation);
      return { result: invocation.result };
    },

    /** Queue position; 0 once an instance is working on it. */
    position(principal: Principal, requestId: string) {
      const invocation = invocations.get(requestId);
      if (!invocation || invocation.target.ncaId !== principal.ncaId || invocation.state === 'done') {
        throw notFound(`Request '${requestId}' is not queued or running`);
      }
      return {
        functionId: invocation.target.functionId,
        functionVersionId: invocation.versionId,
        positionInQueue: queue.position(requestId)?.position ?? 0,
      };
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
    ready(versionId: string, ready: ReadyInstance[]) {
      const previous = new Map((slots.get(versionId) ?? []).map((slot) => [slot.ready.instanceId, slot]));
      const next = ready.map((instance) => {
        const slot = previous.get(instance.instanceId) ?? benched.get(instance.instanceId);
        benched.delete(instance.instanceId);
        if (slot) {
          slot.ready = instance;
          return slot;
        }
        return { ready: instance, inflight: 0, pool: poolFor(instance) };
      });
      if (next.length) slots.set(versionId, next);
      else slots.delete(versionId);
      for (const [instanceId, slot] of benched) {
        if (slot.ready.versionId === versionId && slot.inflight === 0) benched.delete(instanceId);
      }
      closeUnusedPools();
      pump(versionId);
    },

    progress(report: ProgressReport) {
      const invocation = invocations.get(report.requestId);
      if (invocation) invocation.progress = { percent: Math.max(0, Math.min(100, Math.round(report.percent))), partialResponse: report.partialResponse };
    },

    /** After a restart: results wait to be collected, queued requests queue again, running ones end errored. */
    async recover() {
      for (const row of await repo.listAll()) {
        const request = JSON.parse(row.request) as { headers: Record<string, string>; sse: boolean; subject: string; target: Target };
        const invocation: Invocation = {
          id: row.request_id, versionId: row.version_id, target: request.target, subject: request.subject, headers: request.headers,
          body: Buffer.from(row.body), sse: request.sse, state: 'queued', durable: true, waiters: new Set(), cancelled: false,
        };
        invocations.set(invocation.id, invocation);
        if (row.state === 'done' && row.result) {
          const stored = JSON.parse(row.result) as Omit<StoredResult, 'body'>;
          invocation.state = 'done';
          invocation.result = { ...stored, body: Buffer.from(row.result_body ?? []) };
        } else if (row.state === 'running') {
          await complete(invocation, problemResult(502, 'bad-gateway', 'The platform restarted while the request was running; it was not retried (at-most-once execution)'));
        } else {
          if (!invoked.has(invocation.versionId)) invoked.set(invocation.versionId, { target: invocation.target });
          queue.enqueue(invocation);
          reportDemand(invocation.versionId);
        }
      }
      sweeper = setInterval(() => {
        const cutoff = now().getTime() - options.resultRetentionMs;
        for (const invocation of invocations.values()) {
          if (invocation.finishedAt !== undefined && invocation.finishedAt < cutoff) invocations.delete(invocation.id);
        }
        void repo.deleteOlderThan(new Date(cutoff).toISOString()).catch(() => {});
      }, 60_000);
      sweeper.unref();
    },

    async close() {
      clearInterval(sweeper);
      for (const invocation of invocations.values()) {
        invocation.cancelled = true;
        invocation.abort?.abort();
        for (const wake of invocation.waiters) wake();
      }
      await Promise.all([...pools.values()].map((pool) => pool.close().catch(() => {})));
    },
  };
}

export type InvocationService = ReturnType<typeof createInvocationService>;
