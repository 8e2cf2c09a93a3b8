// An Express app for one host: request ids, access log, JSON bodies, the declared routes, and the
// single place where errors become problem+json.
import { randomUUID } from 'node:crypto';
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import type { Logger } from '../logger.ts';
import type { CredentialVerifier } from './auth.ts';
import { Problem, PROBLEM_CONTENT_TYPE } from './problem.ts';
import { expressPath, handlerFor, type Route } from './route.ts';

export interface AppOptions {
  routes: Route[];
  verifier: CredentialVerifier;
  log: Logger;
  bodyLimit: string;
  /** Header that carries the request id on this host's responses. */
  requestIdHeader?: string;
  /** Request metrics (http/metrics.ts), labelled with `host` and the declared route template. */
  metrics?: { observeHttp(host: string, method: string, route: string, status: number, seconds: number): void };
  host?: string;
  /** Plain Express handlers tried before the declared routes (the streaming sign-in, which lives on any path). */
  handlers?: RequestHandler[];
}

export function createApp(options: AppOptions) {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  const requestIdHeader = options.requestIdHeader ?? 'x-request-id';

  app.use((req: Request, res: Response, next: NextFunction) => {
    const requestId = randomUUID();
    res.locals.requestId = requestId;
    res.setHeader(requestIdHeader, requestId);
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      options.metrics?.observeHttp(options.host ?? 'api', req.method, res.locals.route ?? 'unmatched', res.statusCode, ms / 1000);
      options.log.info({
        reqId: requestId,
        method: req.method,
        url: req.originalUrl,
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

/** Maps anything thrown to a catalogue problem; unexpected errors are logged and hidden. */
export function asProblem(error: unknown, log: Logger, requestId: string): Problem {
  if (error instanceof Problem) return error;
  const status = (error as { status?: number; type?: string }).status;
  const type = (error as { type?: string }).type;
  if (type === 'entity.parse.failed') return new Problem('bad-request', 'Request body is not valid JSON');
  if (type === 'entity.too.large') return new Problem('payload-too-large', 'Request body is too large');
  if (type === 'encoding.unsupported' || type === 'charset.unsupported') {
    return new Problem('unsupported-media-type', 'Request body encoding is not supported');
  }
  if (status && status >= 400 && status < 500) return new Problem('bad-request', 'Malformed request');
  log.error({ reqId: requestId, err: error }, 'unhandled error');
  return new Problem('internal', 'The server could not complete the request; quote the request id when reporting it');
}

export function sendProblem(res: Response, problem: Problem, instance: string) {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.status(problem.status).set(problem.headers).type(PROBLEM_CONTENT_TYPE);
  res.send(JSON.stringify(problem.toBody(instance.split('?')[0], res.locals.requestId)));
}
