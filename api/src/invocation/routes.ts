// Invocation endpoints (spec 4.1, 5.3; wire-reference 5): pexec and its status, and queue details.
// pexec is the hot path: declared `lean`, it is served before Express (http/lean.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { access } from '../http/auth.ts';
import { type Principal } from '../domain/principal.ts';
import { Problem } from '../domain/problem.ts';
import { route } from '../http/route.ts';
import { assetReferencesHeader } from '../control/assets/schema.ts';
import { functionParams, versionParams } from '../control/functions/schema.ts';
import type { FunctionRef } from '../domain/load.ts';
import type { Logger } from '../logger.ts';
import { signedQuery } from '../domain/signed-paths.ts';
import { forwardedRequestHeaders } from './headers.ts';
import { largeResultPath, type LargeResults } from './large-results.ts';
import type { FunctionRouting } from './host-routing.ts';
import type { PassThrough } from './invocation.ts';
import { ClientReply, sendPending, sendResult } from './reply.ts';
import type { VersionResolver } from './resolver.ts';
import type { InvocationService } from './service.ts';

/** Told of every answered invocation of a resolved version (http/metrics.ts observeInvocation). */
export type InvocationObserver = (ref: FunctionRef, status: number, seconds: number) => void;

const tag = 'Invocation';
const invokeAccess = access.functions('invoke_function');
const queueDetails = access.functions('queue_details');

export interface PollLimits {
  defaultSeconds: number;
  sseDefaultSeconds: number;
  maxSeconds: number;
}

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

const tooLarge = (limit: number) => new Problem('payload-too-large', `Request body exceeds ${limit} bytes`);

/**
 * The whole request body, refused past `limit`. A small body has usually arrived with the head: it is taken
 * from the stream's buffer at once (its end may not be parsed yet). Otherwise events rather than
 * for-await: cheaper per request.
 */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? Number.NaN);
  if (declared > limit) return Promise.reject(tooLarge(limit));
  if (req.readableFlowing === null && req.readableLength === declared) return Promise.resolve((req.read() as Buffer | null) ?? Buffer.alloc(0));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.removeAllListeners('data');
        req.resume();
        reject(tooLarge(limit));
      } else chunks.push(chunk);
    });
    req.once('end', () => resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)));
    req.once('error', reject);
  });
}

const pathOf = (req: IncomingMessage) => (req.url ?? '').split('?', 1)[0];

const statusParams = z.object({ requestId: z.guid('must be a request id (UUID)') });
const anything = { schema: z.unknown(), contentType: '*/*' };
const invocationResponses = {
  200: { description: "The function's response, streamed as produced (text/event-stream too)", ...anything },
  202: { description: 'Not finished within SVC-POLL-SECONDS: poll GET /v2/svc/pexec/status/{SVC-REQID}; the body is the partial response, if any', ...anything },
  302: { description: 'A polled result larger than invocation.maxResultBytes: Location is a signed URL of a zip holding it' },
};
const queueSchema = z.object({
  functionId: z.string(),
  queues: z.array(z.object({ functionVersionId: z.string(), functionName: z.string(), functionStatus: z.string(), queueDepth: z.number().int() })),
});

export interface InvocationRouteOptions {
  limits: PollLimits & { maxRequestBytes: number };
  log: Logger;
  observe?: InvocationObserver;
  /** A 404 Problem unless the account has every asset named (control/assets). */
  checkAssets(ncaId: string, assetIds: string[]): Promise<void>;
  largeResults: LargeResults;
  /** Admission by the version's rate limit (rate-limits/): a 429 Problem, or undefined when nothing to wait for. */
  admit?(principal: Principal, target: FunctionRef): Promise<void> | undefined;
}

interface InvokeInput {
  principal: Principal;
  params: FunctionRouting;
  headers: { 'svc-poll-seconds'?: number; accept?: string; 'svc-input-asset-references'?: string[] };
  req: IncomingMessage;
  requestId: string;
}

/** Resolves, reads the body and queues; the plane answers the client's sink. */
function invoker(service: InvocationService, options: InvocationRouteOptions) {
  const { limits, observe } = options;
  return async (input: InvokeInput, res: ServerResponse, passThrough?: PassThrough) => {
    const { principal, params: ids, headers: given, req, requestId } = input;
    const started = performance.now();
    const sse = given.accept !== undefined && given.accept.includes('text/event-stream');
    // Metrics only for versions that resolved: labels never carry an id a caller made up.
    const target = await service.resolve(principal, ids.functionId, ids.functionVersionId);
    const seen = (status: number) => observe?.(target, status, (performance.now() - started) / 1000);
    try {
      const admission = options.admit?.(principal, target);
      if (admission) await admission;
      const assets = given['svc-input-asset-references'];
      if (assets?.length) await options.checkAssets(principal.ncaId, assets);
      const body = await readBody(req, limits.maxRequestBytes);
      const request = { headers: forwardedRequestHeaders(req.headers, passThrough !== undefined), body, sse, passThrough, assets };
      const sink = new ClientReply(res, pathOf(req), requestId, options.log, seen);
      // The longer default for event streams is pexec's alone (the reference keeps it for old clients).
      const invocation = await service.submit(requestId, target, principal, request, sink, pollMs(given['svc-poll-seconds'], sse && !passThrough, limits));
      res.on('close', () => {
        if (!res.writableFinished) void service.cancel(invocation);
      });
    } catch (error) {
      seen((error as { status?: number }).status ?? 500);
      throw error;
    }
  };
}

/**
 * Host-routed invocation (host-routing.ts finds the function): the client's method, path and query reach
 * the container, errors are not rewrapped; auth, queueing, 202 and SSE as pexec. Served lean, not in the
 * OpenAPI document (a Host cannot be described there; docs/api.md does).
 */
export function hostRoutedRoute(service: InvocationService, options: InvocationRouteOptions) {
  const invoke = invoker(service, options);
  return route({
    method: 'POST', path: '/{path}', summary: 'Invoke the function named by the Host, with any method and path', tag, access: invokeAccess,
    params: z.object({ functionId: z.string(), functionVersionId: z.string().optional() }), headers: pollHeaders(options.limits),
    responses: invocationResponses, lean: true,
    handle: async (input, res: ServerResponse) => {
      await invoke(input, res, { method: input.req.method ?? 'GET', path: input.req.url ?? '/' });
      return undefined;
    },
  });
}

export function invocationRoutes(service: InvocationService, resolver: VersionResolver, options: InvocationRouteOptions) {
  const { limits } = options;
  const headers = pollHeaders(limits);
  // Only pexec stages input assets: a host-routed request passes through as it came, as the reference's.
  const pexecHeaders = headers.extend({ 'svc-input-asset-references': assetReferencesHeader.optional() });
  const invoke = invoker(service, options);

  const pexec = (path: string, params: typeof functionParams | typeof versionParams) => route({
    method: 'POST', path, summary: 'Invoke a function; the body and headers pass through to its inferenceUrl', tag, access: invokeAccess,
    params, headers: pexecHeaders, responses: invocationResponses, lean: true,
    // Lean: Node's own response object, so its type here is ServerResponse, not Express's.
    handle: async (input, res: ServerResponse) => {
      await invoke(input, res);
      return undefined;
    },
  });

  const queueDetail = async (ncaId: string, functionId: string, versionId?: string) => ({
    functionId,
    queues: (await resolver.listed(ncaId, functionId, versionId)).map((row) => ({
      functionVersionId: row.version_id, functionName: row.name, functionStatus: row.status, queueDepth: service.depth(row.version_id),
    })),
  });

  return [
    pexec('/v2/svc/pexec/functions/{functionId}', functionParams),
    pexec('/v2/svc/pexec/functions/{functionId}/versions/{functionVersionId}', versionParams),
    route({
      method: 'GET', path: '/v2/svc/pexec/status/{requestId}', summary: 'Poll a request answered 202; the final answer comes once', tag,
      access: invokeAccess, params: statusParams, headers,
      responses: invocationResponses,
      handle: async ({ principal, params, headers: given, req, requestId }, res) => {
        const outcome = await service.status(principal, params.requestId, pollMs(given['svc-poll-seconds'], false, limits));
        if ('pending' in outcome) sendPending(res, outcome.pending, requestId);
        else sendResult(res, { id: params.requestId, requestId, rewrap: outcome.rewrap }, outcome.result, pathOf(req));
        return undefined;
      },
    }),
    route({
      method: 'GET', path: largeResultPath('{requestId}'), summary: 'Download a large result (the signed Location of its 302)', tag,
      access: access.public, params: statusParams, query: signedQuery,
      responses: { 200: { description: 'A zip holding <requestId>.response', contentType: 'application/zip', schema: z.unknown() } },
      handle: async ({ params, query }, res) => {
        const blob = await options.largeResults.download(params.requestId, query);
        res.writeHead(200, {
          'content-type': 'application/zip', 'content-length': String(blob.size), 'content-disposition': `attachment; filename="${params.requestId}.zip"`,
        });
        await pipeline(blob.body, res);
        return undefined;
      },
    }),
    route({
      method: 'GET', path: '/v2/svc/queues/{requestId}/position', summary: 'Position of a request in its queue (0 once running)', tag,
      access: queueDetails, params: statusParams,
      responses: { 200: { description: 'Position', schema: z.object({ functionId: z.string(), functionVersionId: z.string(), positionInQueue: z.number().int() }) } },
      handle: async ({ principal, params }) => ({ body: await service.position(principal, params.requestId) }),
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
