// The hot path served before Express: routes declared `lean` are matched here on method and path and run
// through the same runRoute (authorize → validate → handle) with the same request id, access log, metrics
// and problem+json errors as the Express app, without Express's per-request work.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { redactUrl, type Logger } from '../logger.ts';
import type { CredentialVerifier, Principal } from '../domain/principal.ts';
import { asProblem, writeProblem } from './problem-response.ts';
import { runRoute, type Route } from './route.ts';

export interface LeanServerOptions {
  verifier: CredentialVerifier;
  log: Logger;
  metrics?: { observeHttp(host: string, method: string, route: string, status: number, seconds: number): void };
  host?: string;
}

export interface LeanOptions extends LeanServerOptions {
  routes: Route[];
}

/** Serves one route outside Express: its params were found by the caller (a path pattern, a Host name). */
export type LeanServe = (route: Route, params: unknown, req: IncomingMessage, res: ServerResponse) => Promise<void>;

interface LeanRoute {
  route: Route;
  pattern: RegExp;
  names: string[];
}

/** /a/{id}/b → ^/a/([^/]+)/b/?$, case-insensitive like Express's router. */
function compile(route: Route): LeanRoute {
  if (route.body || route.query) throw new Error(`lean route ${route.path} must read neither body nor query through its declaration`);
  const names: string[] = [];
  const source = route.path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{(\w+)\\?\}/g, (_match, name: string) => {
    names.push(name);
    return '([^/]+)';
  });
  return { route, pattern: new RegExp(`^${source}/?$`, 'i'), names };
}

function paramsOf(lean: LeanRoute, match: RegExpExecArray): Record<string, string> | undefined {
  const params: Record<string, string> = {};
  try {
    for (let i = 0; i < lean.names.length; i++) params[lean.names[i]] = decodeURIComponent(match[i + 1]);
  } catch {
    return undefined;
  }
  return params;
}

/** Runs a route with the request id, access log, metrics and problem+json errors of the Express app. */
export function leanServer(options: LeanServerOptions): LeanServe {
  const context = { verifier: options.verifier, log: options.log };
  const host = options.host ?? 'api';

  return async (route, params, req, res) => {
    const requestId = randomUUID();
    const started = performance.now();
    let principal: Principal | undefined;
    // No setHeader here: each of the route's answers writes x-request-id itself (Node's cheaper writeHead).
    res.on('finish', () => {
      const ms = performance.now() - started;
      options.metrics?.observeHttp(host, req.method!, route.path, res.statusCode, ms / 1000);
      if (options.log.isLevelEnabled('info')) {
        options.log.info({ reqId: requestId, method: req.method, url: redactUrl(req.url ?? ''), status: res.statusCode, ms, credentialId: principal?.credentialId }, 'request');
      }
    });
    try {
      const reply = await runRoute(route, context, { req, params, requestId, identified: (who) => { principal = who; } }, res);
      if (reply) throw new Error(`lean route ${route.path} must write its own response`);
    } catch (error) {
      writeProblem(res, asProblem(error, options.log, requestId), req.url ?? '', requestId);
    }
  };
}

/** Returns a handler that serves a lean route and answers true, or answers false (Express takes it). */
export function leanRouter(options: LeanOptions): ((req: IncomingMessage, res: ServerResponse) => boolean) | undefined {
  const routes = options.routes.filter((route) => route.lean).map(compile);
  if (routes.length === 0) return undefined;
  const serve = leanServer(options);

  return (req, res) => {
    const path = req.url!.split('?', 1)[0];
    for (const lean of routes) {
      if (req.method !== lean.route.method) continue;
      const match = lean.pattern.exec(path);
      const params = match && paramsOf(lean, match);
      if (!params) continue;
      void serve(lean.route, params, req, res);
      return true;
    }
    return false;
  };
}
