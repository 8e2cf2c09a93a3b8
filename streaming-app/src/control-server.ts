// The control server of spec §4.6: the platform health-checks readiness here and posts the STUN/TURN
// credentials of the coming session. Small and dependency-free on purpose: two routes, JSON only.
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { credentialsSchema, type CredentialStore } from './credentials.ts';
import { methodNotAllowed, notFound, problemType, sendJson, sendProblem } from './http-problem.ts';
import type { Logger } from './logger.ts';

export const READY_PATH = '/v1/streaming/ready';
export const CREDS_PATH = '/v1/streaming/creds';
const MAX_BODY_BYTES = 16 * 1024;

export type Readiness = { ready: true } | { ready: false; reason: string };

export type ControlServerOptions = {
  readiness: () => Readiness | Promise<Readiness>;
  credentials: CredentialStore;
  log: Logger;
  /** Called after credentials were accepted, e.g. to log or to prepare the next session. */
  onCredentials?: () => void;
};

export type ControlServer = {
  server: Server;
  listen(port: number, host?: string): Promise<number>;
  close(): Promise<void>;
};

class BodyError extends Error {
  readonly status: number;
  readonly title: string;
  constructor(status: number, title: string, message: string) {
    super(message);
    this.status = status;
    this.title = title;
  }
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > MAX_BODY_BYTES) {
      reject(new BodyError(413, 'Content Too Large', `body exceeds ${MAX_BODY_BYTES} bytes`));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new BodyError(413, 'Content Too Large', `body exceeds ${MAX_BODY_BYTES} bytes`));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function invalidField(req: IncomingMessage, res: ServerResponse, field: string, detail: string): void {
  sendProblem(req, res, { type: problemType('invalid-field'), title: 'Invalid request body', status: 400, detail, field });
}

async function handleCreds(req: IncomingMessage, res: ServerResponse, options: ControlServerOptions): Promise<void> {
  const contentType = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
  if (contentType !== 'application/json') {
    sendProblem(req, res, {
      type: problemType('unsupported-media-type'), title: 'Unsupported Media Type', status: 415,
      detail: `Content-Type must be application/json (got "${contentType || 'none'}")`, field: 'Content-Type',
    });
    return;
  }
  let raw: Buffer;
  try {
    raw = await readBody(req);
  } catch (error) {
    if (error instanceof BodyError) {
      sendProblem(req, res, { type: problemType('invalid-body'), title: error.title, status: error.status, detail: error.message });
    }
    return;
  }
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    invalidField(req, res, '(body)', 'body is not valid JSON');
    return;
  }
  const parsed = credentialsSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    // "unrecognized_keys" carries the offending names in `keys`, not in `path`.
    const field = issue.code === 'unrecognized_keys' ? issue.keys.join(',') : issue.path.join('.') || '(body)';
    const detail = issue.code === 'unrecognized_keys'
      ? `unknown field(s): ${issue.keys.join(', ')}`
      : `${field}: ${issue.message}`;
    invalidField(req, res, field, detail);
    return;
  }
  options.credentials.set(parsed.data);
  // The address is operational data; the username/password never reach a log line.
  options.log.info({ stunIp: parsed.data.stunIp, stunPort: parsed.data.stunPort }, 'stun/turn credentials received');
  options.onCredentials?.();
  sendJson(req, res, 200, { status: 'ok' });
}

async function handleReady(req: IncomingMessage, res: ServerResponse, options: ControlServerOptions): Promise<void> {
  const readiness = await options.readiness();
  if (readiness.ready) {
    sendJson(req, res, 200, { status: 'ready' });
    return;
  }
  sendProblem(req, res, { type: problemType('not-ready'), title: 'Not ready', status: 500, detail: readiness.reason });
}

export function createControlServer(options: ControlServerOptions): ControlServer {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const route = path === READY_PATH ? handleReady : path === CREDS_PATH ? handleCreds : undefined;
    if (!route) {
      notFound(req, res);
      return;
    }
    const allowed = route === handleReady ? ['GET', 'HEAD'] : ['POST'];
    if (!allowed.includes(req.method ?? '')) {
      methodNotAllowed(req, res, allowed.join(', '));
      return;
    }
    route(req, res, options).catch((error: unknown) => {
      options.log.error({ err: error, path }, 'control request failed');
      if (!res.headersSent) {
        sendProblem(req, res, { type: problemType('internal'), title: 'Internal Server Error', status: 500, detail: 'the request could not be handled' });
      }
    });
  });
  // Health probes are short-lived; do not keep idle sockets around past the session.
  server.keepAliveTimeout = 2000;
  return {
    server,
    listen: async (port, host) => {
      await once(server.listen(port, host), 'listening');
      return (server.address() as AddressInfo).port;
    },
    close: () => new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
