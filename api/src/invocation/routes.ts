// Invocation endpoints (spec 4.1, 5.3; wire-reference 5): pexec and its status, and queue details.
// pexec is the hot path: declared `lean`, it is served before Express (http/lean.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { access } from '../http/auth.ts';
import { Problem } from '../http/problem.ts';
import { route } from '../http/route.ts';
import { functionParams, versionParams } from '../control/functions/schema.ts';
import type { FunctionRef } from '../http/metrics.ts';
import type { Logger } from '../logger.ts';
import { ClientReply, sendPending, sendResult } from './reply.ts';
import type { VersionResolver } from './resolver.ts';
import type { InvocationService } from './service.ts';

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

const pathOf = (req: IncomingMessage) => (req.url ?? '').split('?', 1)[0];

const statusParams = z.object({ requestId: z.guid('must be a request id (UUID)') });
const anything = { schema: z.unknown(), contentType: '*/*' };
const invocationResponses = {
  200: { description: "The function's response, streamed as produced (text/event-stream too)", ...anything },
  202: { description: 'Not finished within SVC-POLL-SECONDS: poll GET /v2/svc/pexec/status/{SVC-REQID}; the body is the partial response, if any', ...anything },
};
const queueSchema = z.object({
  functionId: z.string(),
  queues: z.array(z.object({ functionVersionId: z.string(), functionName: z.string(), functionStatus: z.string(), queueDepth: z.number().int() })),
});

export interface InvocationRouteOptions {
  limits: PollLimits & { maxRequestBytes: number };
  log: Logger;
  observe?: InvocationObserver;
}

export function invocationRoutes(service: InvocationService, resolver: VersionResolver, options: InvocationRouteOptions) {
  const { limits, observe } = options;
  const headers = pollHeaders(limits);

  const pexec = (path: string, params: typeof functionParams | typeof versionParams) => route({
    method: 'POST', path, summary: 'Invoke a function; the body and headers pass through to its inferenceUrl', tag, access: invoke,
    params, headers, responses: invocationResponses, lean: true,
    // Lean: Node's own response object, so its type here is ServerResponse, not Express's.
    handle: async ({ principal, params: ids, headers: given, req, requestId }, res: ServerResponse) => {
      const started = performance.now();
      const sse = given.accept !== undefined && given.accept.includes('text/event-stream');
      // Metrics only for versions that resolved: labels never carry an id a caller made up.
      const target = await service.resolve(principal, ids.functionId, 'functionVersionId' in ids ? ids.functionVersionId as string : undefined);
      const seen = (status: number) => observe?.(target, status, (performance.now() - started) / 1000);
      try {
        const body = await readBody(req, limits.maxRequestBytes);
        const sink = new ClientReply(res, pathOf(req), requestId, options.log, seen);
        const invocation = await service.submit(target, principal, req.headers, body, sse, sink, pollMs(given['svc-poll-seconds'], sse, limits));
        res.once('close', () => {
          if (!res.writableFinished) void service.cancel(invocation);
        });
      } catch (error) {
        seen((error as { status?: number }).status ?? 500);
        throw error;
      }
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
      access: invoke, params: statusParams, headers,
      responses: invocationResponses,
      handle: async ({ principal, params, headers: given, req }, res) => {
        const outcome = await service.status(principal, params.requestId, pollMs(given['svc-poll-seconds'], false, limits));
        if ('pending' in outcome) sendPending(res, outcome.pending);
        else sendResult(res, { sse: false, id: params.requestId }, outcome.result, pathOf(req));
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
