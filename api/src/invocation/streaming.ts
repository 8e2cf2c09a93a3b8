// The streaming session broker (spec 4.6, 4.7; wire-reference 9). A browser's WebSocket (through the
// intermediary proxy) arrives at the gateway; the broker authenticates it, picks an instance of the
// STREAMING function that is ready and has no session, pushes it fresh STUN/TURN credentials, and pipes
// the WebSocket to the instance's streaming server. The session id travels back as cookie
// `svc-request-id` and header `svc-reqid`; a reconnect carrying either within the resume window
// reaches the same instance. Session lifetime follows the TCP connection: a dropped connection opens the
// resume window, and the container itself ends a cleanly closed session and exits.
//
// As in the reference's sign-in flow, a client may first reserve a session with a plain HTTP request
// carrying `SVC-ABSORB: true` (POST: reserve, answered with the cookie; DELETE: end it) and then open the
// WebSocket with that cookie. Browsers keep cookies set on ordinary responses but ignore them on a refused
// WebSocket handshake, so the reservation is also how a browser replaces a stale session cookie.
import { randomUUID } from 'node:crypto';
import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { createProxyServer } from 'http-proxy-3';
import { request } from 'undici';
import { bearerOf, type CredentialVerifier, type Principal } from '../http/auth.ts';
import { forbidden, notFound, Problem, PROBLEM_CONTENT_TYPE, unauthorized } from '../http/problem.ts';
import { rejectUpgrade } from '../http/upgrade.ts';
import type { Logger } from '../logger.ts';
import type { FunctionsRepo } from '../control/functions/repo.ts';
import type { InstancesService, ReadyInstance } from '../control/instances/service.ts';
import type { TurnService } from '../turn/server.ts';

export const SESSION_COOKIE = 'svc-request-id';
const DEPLOYABLE = new Set(['ACTIVE', 'DEPLOYING', 'DEGRADING']);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Sec-WebSocket-Protocol items that carry what a browser cannot put in headers; never passed on. */
const CREDENTIAL_ITEMS = ['authorization.', 'function-id.', 'function-version-id.'];
/** A reserved session whose WebSocket never arrives is released after this long. */
const RESERVATION_MS = 30_000;
const cookieFor = (id: string) => `${SESSION_COOKIE}=${id}; Path=/; HttpOnly; SameSite=Lax`;
const CLEAR_COOKIE = `${SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax`;

export interface StreamingOptions {
  verifier: CredentialVerifier;
  functionsRepo: FunctionsRepo;
  instances: InstancesService;
  turn: TurnService;
  log: Logger;
  /** How long a dropped session waits for its browser to reconnect (at most 300 s). */
  resumeWindowMs: number;
  /** How long a new session waits for a free instance before 503. */
  waitForInstanceMs: number;
  now?: () => Date;
}

interface Session {
  id: string;
  ncaId: string;
  versionId: string;
  instance: ReadyInstance;
  inferenceUrl: string;
  /** The live browser connection, if any. */
  client?: Duplex;
  /** Whether a WebSocket ever connected (a reservation's first connection is not a resume). */
  connectedOnce: boolean;
  /** Ends a session nobody is connected to: the resume window, or a reservation's wait. */
  idleTimer?: NodeJS.Timeout;
}

interface Route {
  session: Session;
  resumed: boolean;
}

export function createStreamingBroker(options: StreamingOptions) {
  const { log } = options;
  const now = options.now ?? (() => new Date());
  const ready = new Map<string, ReadyInstance[]>();
  const sessions = new Map<string, Session>();
  /** instanceId → session: one session per instance. */
  const busy = new Map<string, Session>();
  const waiting = new Map<string, number>();
  const routes = new WeakMap<IncomingMessage, Route>();
  const proxy = createProxyServer({ xfwd: false, proxyTimeout: 0 });

  // Before http-proxy-3 writes the instance's 101 to the browser, add the session cookie and header,
  // and tie the two sockets' lifetimes together.
  proxy.on('proxyReqWs', (proxyReq: ClientRequest, req: IncomingMessage, client: Socket) => {
    const route = routes.get(req);
    if (!route) return;
    proxyReq.on('upgrade', (response: IncomingMessage, upstream: Socket) => {
      const { session } = route;
      response.headers['set-cookie'] = [cookieFor(session.id)];
      response.headers['svc-reqid'] = session.id;
      attach(session, client);
      // An abrupt drop of the browser must reach the container as one, so it keeps the session to resume.
      client.once('close', () => upstream.destroy());
      upstream.once('close', () => client.destroy());
      log.info({ sessionId: session.id, instanceId: session.instance.instanceId, resumed: route.resumed }, 'streaming session connected');
    });
  });
  proxy.on('error', (error: Error, req: IncomingMessage, socket: unknown) => {
    const route = routes.get(req);
    log.warn({ sessionId: route?.session.id, err: error.message }, 'streaming instance unreachable');
    if (route && !route.resumed) end(route.session);
    const duplex = socket as Duplex;
    if (duplex.writable && !duplex.destroyed) rejectUpgrade(req, duplex, new Problem('bad-gateway', 'The streaming instance did not accept the connection'));
  });

  function attach(session: Session, client: Duplex) {
    clearTimeout(session.idleTimer);
    if (session.client && session.client !== client) session.client.destroy();
    session.client = client;
    session.connectedOnce = true;
    client.once('close', () => {
      if (session.client !== client || !sessions.has(session.id)) return;
      session.client = undefined;
      endWhenIdle(session, options.resumeWindowMs);
    });
  }

  function endWhenIdle(session: Session, ms: number) {
    clearTimeout(session.idleTimer);
    session.idleTimer = setTimeout(() => end(session), ms);
    session.idleTimer.unref();
  }

  function end(session: Session) {
    clearTimeout(session.idleTimer);
    session.client?.destroy();
    sessions.delete(session.id);
    if (busy.get(session.instance.instanceId) === session) busy.delete(session.instance.instanceId);
    reportDemand(session.versionId);
  }

  function reportDemand(versionId: string) {
    const active = [...busy.values()].filter((session) => session.versionId === versionId).length;
    options.instances.setDemand(versionId, active + (waiting.get(versionId) ?? 0));
  }

  function protocolItems(req: IncomingMessage): string[] {
    return (req.headers['sec-websocket-protocol'] ?? '').split(',').map((item) => item.trim()).filter(Boolean);
  }

  function fromItems(items: string[], prefix: string): string | undefined {
    return items.find((item) => item.startsWith(prefix))?.slice(prefix.length);
  }

  function sessionIdOf(req: IncomingMessage): string | undefined {
    const header = req.headers['svc-reqid'];
    if (typeof header === 'string' && header) return header;
    for (const part of (req.headers.cookie ?? '').split(';')) {
      const [name, ...value] = part.trim().split('=');
      if (name === SESSION_COOKIE) return value.join('=');
    }
    return undefined;
  }

  async function authenticate(req: IncomingMessage, items: string[]): Promise<Principal> {
    const fromItem = fromItems(items, 'authorization.')?.replace(/^Bearer\s+/i, '');
    const bearer = bearerOf(req.headers.authorization) ?? fromItem;
    if (!bearer) throw unauthorized('A streaming session needs a bearer credential (Authorization header or an authorization.<key> subprotocol item)');
    const principal = await options.verifier.verify(bearer);
    if (principal.kind !== 'token' && principal.kind !== 'api-key') throw forbidden('Streaming sessions accept SVC_TOKEN or SVC_API_KEY');
    if (!principal.scopes.has('invoke_function')) throw forbidden("The credential lacks scope 'invoke_function'");
    return principal;
  }

  /** The STREAMING versions a request may use: the one named, or any deployable one. */
  async function versionsFor(principal: Principal, functionId: string, versionId?: string) {
    const rows = (await options.functionsRepo.listVersionsOf(principal.ncaId, functionId))
      .filter((row) => !versionId || row.version_id === versionId);
    if (rows.length === 0) throw notFound(`Function id '${functionId}'${versionId ? `, version '${versionId}'` : ''}: not found`);
    if (rows.every((row) => row.function_type !== 'STREAMING')) throw new Problem('bad-request', `Function id '${functionId}' is not a STREAMING function; invoke it with pexec`);
    const deployable = rows.filter((row) => row.function_type === 'STREAMING' && DEPLOYABLE.has(row.status));
    if (deployable.length === 0) throw notFound(`Function id '${functionId}' has no deployed STREAMING version`);
    return deployable.map((row) => ({ versionId: row.version_id, inferenceUrl: (JSON.parse(row.document) as { inferenceUrl: string }).inferenceUrl }));
  }

  /** Claims a ready instance with no session whose container says it can start one. */
  async function claimInstance(versions: { versionId: string; inferenceUrl: string }[], principal: Principal): Promise<Session> {
    const deadline = Date.now() + options.waitForInstanceMs;
    const first = versions[0].versionId;
    waiting.set(first, (waiting.get(first) ?? 0) + 1);
    reportDemand(first);
    try {
      for (;;) {
        for (const version of versions) {
          for (const instance of ready.get(version.versionId) ?? []) {
            if (busy.has(instance.instanceId) || !await containerReady(instance)) continue;
            if (busy.has(instance.instanceId)) continue;
            const session: Session = {
              id: randomUUID(), ncaId: principal.ncaId, versionId: version.versionId, instance, inferenceUrl: version.inferenceUrl, connectedOnce: false,
            };
            busy.set(instance.instanceId, session);
            return session;
          }
        }
        if (Date.now() >= deadline) {
          throw new Problem('service-unavailable', 'Every instance of this streaming function is in a session; try again shortly', { headers: { 'retry-after': '5' } });
        }
        await sleep(200);
      }
    } finally {
      waiting.set(first, (waiting.get(first) ?? 1) - 1);
    }
  }

  async function containerReady(instance: ReadyInstance): Promise<boolean> {
    const port = instance.endpoint.ports.control;
    if (!port) return false;
    try {
      const response = await request(`http://${instance.endpoint.host}:${port}/v1/streaming/ready`, { headersTimeout: 1000, bodyTimeout: 1000 });
      await response.body.dump();
      return response.statusCode === 200;
    } catch {
      return false;
    }
  }

  /** POST /v1/streaming/creds: the session's STUN/TURN server and short-lived credentials. */
  async function pushCredentials(session: Session) {
    const credentials = options.turn.credentialsFor(session.id, now());
    const port = session.instance.endpoint.ports.control;
    if (!credentials || !port) return;
    const response = await request(`http://${session.instance.endpoint.host}:${port}/v1/streaming/creds`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(credentials), headersTimeout: 2000, bodyTimeout: 2000,
    });
    await response.body.dump();
    if (response.statusCode !== 200) throw new Problem('bad-gateway', `The streaming instance refused its credentials (${response.statusCode})`);
  }

  /** The session a request names by cookie or svc-reqid header, if the caller's account owns it. */
  function existing(req: IncomingMessage, principal: Principal): Session | undefined {
    const id = sessionIdOf(req);
    if (!id) return undefined;
    const session = sessions.get(id);
    if (!session || session.ncaId !== principal.ncaId) {
      throw new Problem('not-found', 'No existing session found; start a new one without the svc-request-id cookie', {
        headers: { 'set-cookie': CLEAR_COOKIE },
      });
    }
    return session;
  }

  /** A new session: a ready, free instance of the function named by headers or subprotocol items. */
  async function place(req: IncomingMessage, items: string[], principal: Principal): Promise<Session> {
    const functionId = (req.headers['svc-function-id'] ?? req.headers['function-id'] ?? fromItems(items, 'function-id.')) as string | undefined;
    const versionId = (req.headers['svc-function-version-id'] ?? req.headers['function-version-id'] ?? fromItems(items, 'function-version-id.')) as string | undefined;
    if (!functionId || !UUID.test(functionId)) throw new Problem('bad-request', 'A streaming session needs the function id: header svc-function-id, or a function-id.<uuid> subprotocol item');
    if (versionId && !UUID.test(versionId)) throw new Problem('bad-request', 'svc-function-version-id must be a function version id (UUID)');
    const session = await claimInstance(await versionsFor(principal, functionId, versionId), principal);
    try {
      await pushCredentials(session);
    } catch (error) {
      end(session);
      throw error instanceof Problem ? error : new Problem('bad-gateway', 'The streaming instance did not take its credentials');
    }
    sessions.set(session.id, session);
    reportDemand(session.versionId);
    log.info({ sessionId: session.id, instanceId: session.instance.instanceId, versionId: session.versionId }, 'streaming session placed');
    return session;
  }

  async function route(req: IncomingMessage, items: string[]): Promise<Route> {
    const principal = await authenticate(req, items);
    const session = existing(req, principal);
    if (session) return { session, resumed: session.connectedOnce };
    return { session: await place(req, items, principal), resumed: false };
  }

  function sendProblem(req: IncomingMessage, res: ServerResponse, problem: Problem) {
    const requestId = randomUUID();
    res.writeHead(problem.status, { 'content-type': `${PROBLEM_CONTENT_TYPE}; charset=utf-8`, 'x-request-id': requestId, ...problem.headers });
    res.end(JSON.stringify(problem.toBody((req.url ?? '/').split('?')[0], requestId)));
  }

  return {
    /** Placement's view of a version's ready instances. Sessions on instances that left it are over. */
    ready(versionId: string, instances: ReadyInstance[]) {
      if (instances.length) ready.set(versionId, instances);
      else ready.delete(versionId);
      const present = new Set(instances.map((instance) => instance.instanceId));
      for (const session of [...sessions.values()]) {
        if (session.versionId === versionId && !present.has(session.instance.instanceId)) end(session);
      }
      for (const [instanceId, session] of busy) {
        if (session.versionId === versionId && !present.has(instanceId)) busy.delete(instanceId);
      }
    },

    /** A WebSocket upgrade on the api host that is not an agent link: a streaming session. */
    async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer) {
      const items = protocolItems(req);
      let routed: Route;
      try {
        routed = await route(req, items);
      } catch (error) {
        const problem = error instanceof Problem ? error : new Problem('internal', 'The session could not be started');
        if (!(error instanceof Problem)) log.error({ err: error }, 'streaming session failed');
        else log.info({ status: problem.status, detail: problem.message }, 'streaming session refused');
        return rejectUpgrade(req, socket, problem);
      }
      const { session } = routed;
      routes.set(req, routed);
      // The container sees its own sign-in path with the browser's query, and none of our credentials.
      const query = (req.url ?? '').includes('?') ? (req.url ?? '').slice((req.url ?? '').indexOf('?')) : '';
      req.url = session.inferenceUrl + query;
      delete req.headers.authorization;
      delete req.headers.cookie;
      const passed = items.filter((item) => !CREDENTIAL_ITEMS.some((prefix) => item.startsWith(prefix)));
      const functionItem = items.find((item) => item.startsWith('function-id.'));
      // Browsers that offered subprotocols need one chosen; the function-id item carries no secret.
      const offered = passed.length ? passed : functionItem ? [functionItem] : [];
      if (offered.length) req.headers['sec-websocket-protocol'] = offered.join(', ');
      else delete req.headers['sec-websocket-protocol'];
      proxy.ws(req, socket, head, { target: `http://${session.instance.endpoint.host}:${session.instance.endpoint.ports.streaming ?? session.instance.endpoint.ports.inference}` });
    },

    /**
     * The sign-in requests of the reference flow (header SVC-ABSORB: true): POST reserves a new session
     * and answers its cookie (any cookie sent along is replaced); DELETE ends the session it names.
     */
    async signIn(req: IncomingMessage, res: ServerResponse) {
      req.resume();
      try {
        const principal = await authenticate(req, []);
        if (req.method === 'DELETE') {
          const session = existing(req, principal);
          if (session) {
            end(session);
            // The container ends a session only on its own protocol's bye; a fresh instance takes its place.
            await options.instances.retire(session.instance.instanceId);
          }
          res.writeHead(204, { 'set-cookie': CLEAR_COOKIE }).end();
          return;
        }
        if (req.method !== 'POST') throw new Problem('method-not-allowed', 'Sign-in takes POST (reserve a session) or DELETE (end it)');
        const session = await place(req, [], principal);
        endWhenIdle(session, RESERVATION_MS);
        res.writeHead(200, { 'content-type': 'application/json', 'set-cookie': cookieFor(session.id), 'svc-reqid': session.id });
        res.end(JSON.stringify({ sessionId: session.id }));
      } catch (error) {
        sendProblem(req, res, error instanceof Problem ? error : new Problem('internal', 'The session could not be started'));
      }
    },

    /** Sessions now, for tests and metrics. */
    sessionCount: () => sessions.size,

    close() {
      for (const session of sessions.values()) {
        clearTimeout(session.idleTimer);
        session.client?.destroy();
      }
      sessions.clear();
      proxy.close();
    },
  };
}

export type StreamingBroker = ReturnType<typeof createStreamingBroker>;
