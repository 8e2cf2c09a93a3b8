// A route is declared once: path, access rule, zod schemas for what comes in and goes out, and a thin
// handler that calls a service. The same declaration mounts the Express handler and feeds /v3/openapi.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Request, Response } from 'express';
import { z } from 'zod';
import type { Logger } from '../logger.ts';
import { authorize, type Access } from './auth.ts';
import { type CredentialVerifier, type Principal } from '../domain/principal.ts';
import { invalid, type InvalidField } from '../domain/problem.ts';
import '../domain/zod-messages.ts';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

type Schema = z.ZodType;
type Out<S> = S extends Schema ? z.output<S> : undefined;

export interface ResponseSpec {
  description: string;
  schema?: Schema;
  contentType?: string;
}

export interface RouteInput<P, Q, B, H> {
  params: P;
  query: Q;
  body: B;
  headers: H;
  principal: Principal;
  requestId: string;
  log: Logger;
  req: Request;
}

export interface Reply {
  status?: number;
  body?: unknown;
  /** A body already serialised as JSON (hot list paths build it as text). */
  json?: string;
  headers?: Record<string, string | string[]>;
}

export interface RouteSpec<P extends Schema | undefined, Q extends Schema | undefined, B extends Schema | undefined, H extends Schema | undefined> {
  method: Method;
  /** OpenAPI form, e.g. /v2/svc/accounts/{ncaId}. */
  path: string;
  summary: string;
  tag: string;
  access: Access;
  params?: P;
  query?: Q;
  body?: B;
  /** Request headers to validate; keys in lower case. */
  headers?: H;
  responses: Record<number, ResponseSpec>;
  /**
   * Served before Express (http/lean.ts) because it is the hot path: `req` and `res` are Node's own
   * objects, nothing reads the body or the query for it, and the handler writes `res` itself.
   */
  lean?: boolean;
  /**
   * Returns the reply, or `undefined` after writing `res` itself (streaming endpoints).
   * Services never see req/res; only routes that must stream touch `res`.
   */
  handle(input: RouteInput<Out<P>, Out<Q>, Out<B>, Out<H>>, res: Response): Promise<Reply | undefined>;
}

// The loose form every route is stored as once declared.
export type Route = RouteSpec<Schema | undefined, Schema | undefined, Schema | undefined, Schema | undefined>;

/** Declares a route with its types inferred from the schemas. */
export function route<P extends Schema | undefined = undefined, Q extends Schema | undefined = undefined,
  B extends Schema | undefined = undefined, H extends Schema | undefined = undefined>(spec: RouteSpec<P, Q, B, H>): Route {
  return spec as unknown as Route;
}

export interface RouteContext {
  verifier: CredentialVerifier;
  log: Logger;
}

export interface Incoming {
  req: IncomingMessage;
  params: unknown;
  query?: unknown;
  body?: unknown;
  requestId: string;
  /** Told the caller once it is known, for the access log. */
  identified?: (principal: Principal) => void;
}

/**
 * Authorizes, validates and runs a route: the part every way of serving it shares. Lean routes get Node's
 * own `req`/`res` here (their handlers declare `res: ServerResponse` and use nothing of Express).
 */
export async function runRoute(spec: Route, context: RouteContext, incoming: Incoming, res: ServerResponse): Promise<Reply | undefined> {
  const { req } = incoming;
  const principal = await authorize(spec.access, req.headers.authorization, context.verifier);
  incoming.identified?.(principal);
  const input = {
    params: validate(spec.params, incoming.params, 'path'),
    query: validate(spec.query, incoming.query, 'query'),
    headers: validate(spec.headers, req.headers, 'header'),
    body: validate(spec.body, incoming.body, 'body'),
    principal,
    requestId: incoming.requestId,
    log: context.log,
    req,
  };
  return spec.handle(input as never, res as Response);
}

/** Turns a route into the Express handler that authorizes, validates, runs and replies. */
export function handlerFor(spec: Route, context: RouteContext) {
  return async (req: Request, res: Response) => {
    const reply = await runRoute(spec, context, {
      req, params: req.params, query: req.query, body: req.body, requestId: res.locals.requestId as string,
      identified: (principal) => {
        res.locals.principal = principal;
      },
    }, res);
    if (!reply) return;
    if (reply.headers) res.set(reply.headers);
    res.status(reply.status ?? 200);
    if (reply.json !== undefined) res.type('application/json').send(reply.json);
    else if (reply.body === undefined) res.end();
    else res.json(reply.body);
  };
}

function validate(schema: Schema | undefined, value: unknown, where: 'path' | 'query' | 'header' | 'body') {
  if (!schema) return undefined;
  // Headers are not walked: Node's HTTP parser already refuses a NUL in one (the gateway answers it).
  const odd = where === 'header' ? undefined : firstOddValue(value);
  if (odd) throw invalid([{ field: fieldName(where, odd.path), message: odd.message }]);
  const result = schema.safeParse(value ?? {});
  if (result.success) return result.data;
  const errors: InvalidField[] = result.error.issues.map((issue) => ({
    field: fieldName(where, issue.path),
    message: issue.message,
  }));
  throw invalid(errors);
}

/** How deeply a request's JSON may nest: far beyond any contract, well within what a schema or JSON.stringify can recurse through. */
const MAX_JSON_DEPTH = 64;

interface Visit {
  value: unknown;
  depth: number;
  key?: string;
  parent?: Visit;
}

/**
 * The first string (a value or a key) holding a NUL character, which PostgreSQL cannot keep in a text
 * column (so every store refuses it alike), or the first value nested deeper than MAX_JSON_DEPTH. Walked
 * with a list rather than recursion, before any schema recurses through the value.
 */
function firstOddValue(value: unknown): { path: string[]; message: string } | undefined {
  const pathOf = (visit: Visit) => {
    const path: string[] = [];
    for (let at: Visit | undefined = visit; at?.key !== undefined; at = at.parent) path.unshift(at.key);
    return path;
  };
  const pending: Visit[] = [{ value, depth: 0 }];
  for (let visit = pending.pop(); visit; visit = pending.pop()) {
    if (typeof visit.value === 'string') {
      if (visit.value.includes('\0')) return { path: pathOf(visit), message: 'must not contain a NUL character (\\u0000)' };
    } else if (visit.value && typeof visit.value === 'object') {
      if (visit.depth === MAX_JSON_DEPTH) return { path: pathOf(visit), message: `must not nest deeper than ${MAX_JSON_DEPTH} levels` };
      for (const [key, child] of Object.entries(visit.value)) {
        const next = { value: child, depth: visit.depth + 1, key, parent: visit };
        if (key.includes('\0')) return { path: pathOf(next), message: 'must not contain a NUL character (\\u0000) in a key' };
        pending.push(next);
      }
    }
  }
  return undefined;
}

function fieldName(where: string, path: PropertyKey[]): string {
  const dotted = path.map(String).join('.');
  if (where === 'body') return dotted || 'body';
  return dotted ? `${where === 'header' ? 'header' : where} ${dotted}` : where;
}

/** OpenAPI path template → Express path. */
export function expressPath(path: string): string {
  return path.replace(/\{(\w+)\}/g, ':$1');
}
