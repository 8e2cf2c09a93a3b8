// An Express app for one host: request ids, access log, JSON bodies, the declared routes, and the
// single place where errors become problem+json.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import { redactUrl, type Logger } from '../logger.ts';
import type { CredentialVerifier } from '../domain/principal.ts';
import { leanRouter } from './lean.ts';
import { Problem } from '../domain/problem.ts';
import { asProblem, writeProblem } from './problem-response.ts';
import { expressPath, handlerFor, type Route } from './route.ts';

export interface AppOptions {
  routes: Route[];
  verifier: CredentialVerifier;
  log: Logger;
  bodyLimit: string;
  /** Request metrics (http/metrics.ts), labelled with `host` and the declared route template. */
  metrics?: { observeHttp(host: string, method: string, route: string, status: number, seconds: number): void };
  host?: string;
  /** Plain Express handlers tried before the declared routes (the streaming sign-in, which lives on any path). */
  handlers?: RequestHandler[];
  /** The requests those handlers take: the lean routes leave them to Express. */
  handled?: (req: IncomingMessage) => boolean;
}

/** The host's handler: lean routes first (http/lean.ts), then the Express app. */
export function createApp(options: AppOptions) {
  const app = createExpressApp(options);
  const lean = leanRouter(options);
  if (!lean) return app;
  const handled = options.handled ?? (() => false);
  return (req: IncomingMessage, res: ServerResponse) => (!handled(req) && lean(req, res)) || app(req, res);
}

function createExpressApp(options: AppOptions) {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');

  app.use((req: Request, res: Response, next: NextFunction) => {
    const requestId = randomUUID();
    res.locals.requestId = requestId;
    res.setHeader('x-request-id', requestId);
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      options.metrics?.observeHttp(options.host ?? 'api', req.method, res.locals.route ?? 'unmatched', res.statusCode, ms / 1000);
      options.log.info({
        reqId: requestId,
        method: req.method,
        url: redactUrl(req.originalUrl),
        status: res.statusCode,
        ms,
        credentialId: res.locals.principal?.credentialId,
      }, 'request');
    });
    next();
  });

  for (const handler of options.handlers ?? []) app.use(handler);
  const json = express.json({ limit: options.bodyLimit, type: () => true });
  for (const route of options.routes) {
    const path = expressPath(route.path);
    const method = route.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'delete';
    const handler = handlerFor(route, { verifier: options.verifier, log: options.log });
    // The template, not the path: metric labels stay bounded whatever ids callers send.
    const named = (_req: Request, res: Response, next: NextFunction) => {
      res.locals.route = route.path;
      next();
    };
    if (route.body) app[method](path, named, requireJson, json, handler);
    else app[method](path, named, handler);
  }

  app.use((req: Request) => {
    throw new Problem('not-found', `No route ${req.method} ${req.path}`);
  });

  app.use((error: unknown, req: Request, res: Response, _next: NextFunction) => {
    const problem = asProblem(error, options.log, res.locals.requestId);
    sendProblem(res, problem, req.originalUrl);
  });
  return app;
}

function requireJson(req: Request, _res: Response, next: NextFunction) {
  const type = req.headers['content-type'];
  // A missing Content-Type is read as JSON (curl -d sends form encoding; clients of the reference omit it).
  if (type && !/^application\/([\w.+-]*\+)?json\b/i.test(type) && !/^application\/x-www-form-urlencoded\b/i.test(type)) {
    throw new Problem('unsupported-media-type', `Content-Type must be application/json, not ${type}`);
  }
  next();
}

export function sendProblem(res: Response, problem: Problem, instance: string) {
  writeProblem(res, problem, instance, res.locals.requestId);
}
