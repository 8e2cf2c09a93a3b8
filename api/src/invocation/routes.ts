// Invocation endpoints (spec 4.1, 5.3; wire-reference 5): pexec and its status, and queue details.
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import { once } from 'node:events';
import type { Response } from 'express';
import { z } from 'zod';
import { access } from '../http/auth.ts';
import { PROBLEM_CONTENT_TYPE, Problem } from '../http/problem.ts';
import { route } from '../http/route.ts';
import { functionParams, versionParams } from '../control/functions/schema.ts';
import type { FunctionsRepo } from '../control/functions/repo.ts';
import { forwardedResponseHeaders, svcStatus } from './headers.ts';
import type { FunctionRef } from '../http/metrics.ts';
import type { Invocation, InvocationService, StoredResult, UpstreamResponse } from './service.ts';

/** Told of every answered invocation of a resolved version (http/metrics.ts observeInvocation). */
export type InvocationObserver = (ref: FunctionRef, status: number, seconds: number) => void;

const tag = 'Invocation';
const invoke = access.functions('invoke_function');
const queueDetails = access.functions('queue_details');

export interface PollLimits {
  defaultSeconds: number;
  sseDefaultSeconds: number;
  maxSeconds: number;
}

const EXPOSED = 'svc-reqid, svc-status, svc-percent-complete';

function pollHeaders(limits: PollLimits) {
  return z.object({
    'svc-poll-seconds': z.string()
      .regex(/^\s*-?\d+\s*$/, 'must be a whole number of seconds')
      .transform(Number)
      .refine((seconds) => seconds <= limits.maxSeconds, `must be at most ${limits.maxSeconds}`)
      .optional(),
    accept: z.string().optional(),
  });
}

function pollMs(header: number | undefined, sse: boolean, limits: PollLimits): number {
  const seconds = header ?? (sse ? limits.sseDefaultSeconds : limits.defaultSeconds);
  return Math.max(1, seconds) * 1000;
}

/** The whole request body, refused past `limit`. Events rather than for-await: cheaper per request. */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.removeAllListeners('data');
        req.resume();
        reject(new Problem('payload-too-large', `Request body exceeds ${limit} bytes`));
      } else chunks.push(chunk);
    });
    req.once('end', () => resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)));
    req.once('error', reject);
  });
}

function kebab(status: number): string {
  return (STATUS_CODES[status] ?? 'error').toLowerCase().replace(/[^a-z0-9]+/g, '-');
}

/** A container's 4xx/5xx as problem+json (wire-reference 5): detail from its JSON `error`, else "Inference error". */
function containerProblem(status: number, body: Buffer, instance: string, requestId: string): string {
  let detail = 'Inference error';
  try {
    const error = (JSON.parse(body.toString('utf8')) as { error?: unknown }).error;
    if (typeof error === 'string' && error) detail = error;
  } catch {
    // not JSON: keep the generic detail
  }
  return JSON.stringify({ type: `urn:inference-service:problem-details:${kebab(status)}`, title: STATUS_CODES[status] ?? 'Error', status, detail, instance, requestId });
}

function invocationHeaders(id: string, status: number): Record<string, string> {
  return { 'svc-reqid': id, 'svc-status': svcStatus(status), 'access-control-expose-headers': EXPOSED };
}

/** Bodies up to this size are read whole and sent in one write; larger ones and SSE stream through. */
const BUFFERED_BYTES = 64 * 1024;

/**
 * The function's response to the waiting client. Event streams and large bodies stream as produced;
 * small bodies (and errors, which are rewrapped) are read first and sent in one write. Copies by hand
 * rather than stream.pipeline, which costs an AbortController and a DOMException per response.
 */
async function sendUpstream(res: Response, invocation: Invocation, upstream: UpstreamResponse, instance: string) {
  const rewrap = upstream.status >= 400 && !invocation.sse;
  const chunks: Buffer[] = [];
  let size = 0;
  let streaming = false;
  const startStreaming = () => {
    streaming = true;
    res.writeHead(upstream.status, { ...forwardedResponseHeaders(upstream.headers), ...invocationHeaders(invocation.id, upstream.status) });
    // Event streams must reach the client as produced; the headers go out before the first event.
    res.flushHeaders();
  };
  if (invocation.sse) startStreaming();
  try {
    for await (const chunk of upstream.body) {
      if (streaming) {
        if (!res.write(chunk)) await once(res, 'drain');
        continue;
      }
      chunks.push(chunk as Buffer);
      size += (chunk as Buffer).length;
      if (!rewrap && size > BUFFERED_BYTES) {
        startStreaming();
        for (const held of chunks.splice(0)) res.write(held);
      }
    }
  } catch {
    res.destroy();
    return;
  }
  if (streaming) {
    res.end();
    return;
  }
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(upstream.headers)) if (value !== undefined) headers[name] = value;
  sendResult(res, invocation, { status: upstream.status, headers, body: Buffer.concat(chunks) }, instance);
}

function sendResult(res: Response, invocation: Invocation, result: StoredResult, instance: string) {
  const headers = { ...invocationHeaders(invocation.id, result.status) };
  if (result.status >= 400 && !invocation.sse && !String(result.headers['content-type'] ?? '').startsWith(PROBLEM_CONTENT_TYPE)) {
    res.writeHead(result.status, { ...headers, 'content-type': `${PROBLEM_CONTENT_TYPE}; charset=utf-8` });
    res.end(containerProblem(result.status, result.body, instance, invocation.id));
    return;
  }
  res.writeHead(result.status, { ...forwardedResponseHeaders(result.headers), ...headers, 'content-length': String(result.body.length) });
  res.end(result.body);
}

function sendPending(res: Response, invocation: Invocation) {
  const headers: Record<string, string> = invocationHeaders(invocation.id, 202);
  const progress = invocation.progress;
  if (progress) headers['svc-percent-complete'] = String(progress.percent);
  if (progress?.partialResponse !== undefined) {
    res.writeHead(202, { ...headers, 'content-type': 'application/json' });
    res.end(JSON.stringify(progress.partialResponse));
  } else {
    res.writeHead(202, headers);
    res.end();
  }
}

const statusParams = z.object({ requestId: z.guid('must be a request id (UUID)') });
const anything = { schema: z.unknown(), contentType: '*/*' };
const invocationResponses = {
  200: { description: "The function's response, streamed as produced (text/event-stream too)", ...anything },
  202: { description: 'Not finished within SVC-POLL-SECONDS: poll GET /v2/svc/pexec/status/{SVC-REQID}; the body is the partial response, if any', ...anything },
};

export function invocationRoutes(service: InvocationService, functionsRepo: FunctionsRepo, limits: PollLimits & { maxRequestBytes: number }, observe?: InvocationObserver) {
  const headers = pollHeaders(limits);

  const pexec = (path: string, params: typeof functionParams | typeof versionParams) => route({
    method: 'POST', path, summary: 'Invoke a function; the body and headers pass through to its inferenceUrl', tag, access: invoke,
    params, headers, responses: invocationResponses,
    handle: async ({ principal, params: ids, headers: given, req }, res) => {
      const started = performance.now();
      const versionId = 'functionVersionId' in ids ? ids.functionVersionId : undefined;
      const sse = (given.accept ?? '').includes('text/event-stream');
      // Metrics only for versions that resolved: labels never carry an id a caller made up.
      const target = await service.resolve(principal, ids.functionId, versionId as string | undefined);
      const seen = (status: number) => observe?.(target, status, (performance.now() - started) / 1000);
      let invocation: Invocation;
      try {
        const body = await readBody(req, limits.maxRequestBytes);
        invocation = service.submit(target, principal, req.headers, body, sse);
      } catch (error) {
        seen((error as { status?: number }).status ?? 500);
        throw error;
      }
      const leave = () => {
        if (!res.writableFinished) service.cancel(invocation);
      };
      res.on('close', leave);
      const outcome = await service.awaitResponse(invocation, pollMs(given['svc-poll-seconds'], sse, limits));
      const instance = req.originalUrl.split('?')[0];
      if ('response' in outcome) await sendUpstream(res, invocation, outcome.response, instance);
      else if ('result' in outcome) sendResult(res, invocation, outcome.result, instance);
      else if ('pending' in outcome) sendPending(res, invocation);
      res.off('close', leave);
      if (!('cancelled' in outcome)) seen(res.statusCode);
      return undefined;
    },
  });

  const queueDetail = async (ncaId: string, functionId: string, versionId?: string) => {
    const versions = (await functionsRepo.listVersionsOf(ncaId, functionId)).filter((row) => !versionId || row.version_id === versionId);
    if (versions.length === 0) throw new Problem('not-found', `Function id '${functionId}'${versionId ? `, version '${versionId}'` : ''}: not found`);
    return {
      functionId,
      queues: versions.map((row) => ({
        functionVersionId: row.version_id, functionName: row.name, functionStatus: row.status, queueDepth: service.depth(row.version_id),
      })),
    };
  };
  const queueSchema = z.object({
    functionId: z.string(),
    queues: z.array(z.object({ functionVersionId: z.string(), functionName: z.string(), functionStatus: z.string(), queueDepth: z.number().int() })),
  });

  return [
    pexec('/v2/svc/pexec/functions/{functionId}', functionParams),
    pexec('/v2/svc/pexec/functions/{functionId}/versions/{functionVersionId}', versionParams),
    route({
      method: 'GET', path: '/v2/svc/pexec/status/{requestId}', summary: 'Poll a request answered 202; the final answer comes once', tag,
      access: invoke, params: statusParams, headers,
      responses: invocationResponses,
      handle: async ({ principal, params, headers: given, req }, res) => {
        const outcome = await service.status(principal, params.requestId, pollMs(given['svc-poll-seconds'], false, limits));
        if ('pending' in outcome) sendPending(res, outcome.pending);
        else sendResult(res, { sse: false, id: params.requestId } as Invocation, outcome.result, req.originalUrl.split('?')[0]);
        return undefined;
      },
    }),
    route({
      method: 'GET', path: '/v2/svc/queues/{requestId}/position', summary: 'Position of a request in its queue (0 once running)', tag,
      access: queueDetails, params: statusParams,
      responses: { 200: { description: 'Position', schema: z.object({ functionId: z.string(), functionVersionId: z.string(), positionInQueue: z.number().int() }) } },
      handle: async ({ principal, params }) => ({ body: service.position(principal, params.requestId) }),
    }),
    route({
      method: 'GET', path: '/v2/svc/queues/functions/{functionId}', summary: 'Queue depth of each version of a function', tag,
      access: queueDetails, params: functionParams,
      responses: { 200: { description: 'Queues', schema: queueSchema } },
      handle: async ({ principal, params }) => ({ body: await queueDetail(principal.ncaId, params.functionId) }),
    }),
    route({
      method: 'GET', path: '/v2/svc/queues/functions/{functionId}/versions/{functionVersionId}', summary: 'Queue depth of a function version', tag,
      access: queueDetails, params: versionParams,
      responses: { 200: { description: 'Queue', schema: queueSchema } },
      handle: async ({ principal, params }) => ({ body: await queueDetail(principal.ncaId, params.functionId, params.functionVersionId) }),
    }),
  ];
}
