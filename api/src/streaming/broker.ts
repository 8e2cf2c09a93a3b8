// The streaming session broker (spec 4.6, 4.7; wire-reference 9). People who want a session of a
// STREAMING function queue in a fair line per function; the head of the line gets the next instance
// that is ready and has no session (the container confirms on /v1/streaming/ready and is handed the
// session's STUN/TURN credentials); then the browser's WebSocket is piped to it.
//
//   waiting ──instance free──► granted ──WebSocket──► connected ──socket closes──► (ask the container)
//      │                          │                     ▲   ready again: never said hello → instance freed at once
//      │                          │                     │   busy: a drop → detached, resume window
//      │                          │                     │   over or gone → instance retired (a fresh one replaces it)
//      │                          │                     └──── reconnect within the window ◄── detached
//      └─ DELETE, not polled, waited too long      └─ no WebSocket within grantSeconds: instance to the next
//
// Every answer comes within settings.answerWithinSeconds. A sign-in that finds no instance is answered
// 202 with its place in line and asks again with svc-reqid; an upgrade waits in line only while it is
// held, then 503. The session id is the same from the first answer on; it travels as header svc-reqid,
// query parameter svc-reqid or cookie svc-request-id.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { access, authorize } from '../http/auth.ts';
import { type CredentialVerifier, type Principal } from '../domain/principal.ts';
import type { FunctionLoad } from '../domain/load.ts';
import { notFound, Problem } from '../domain/problem.ts';
import { rejectUpgrade } from '../http/upgrade.ts';
import type { Logger } from '../logger.ts';
import { documentOf, type FunctionsRepo } from '../control/functions/repo.ts';
import type { InstancesService, ReadyInstance } from '../control/instances/service.ts';
import { takesSessions } from '../invocation/resolver.ts';
import type { TurnService } from '../turn/server.ts';
import { credentialsFor, pushCredentials, readinessOf } from './container.ts';
import { createLine } from './line.ts';
import { CLEAR_SESSION_COOKIE, createSessionPipe } from './pipe.ts';
import { namedBy, targetOf, type Named } from './request.ts';
import type { SessionSubject, StreamingSession } from './sessions.ts';
import type { StreamingSettings } from './settings.ts';

export interface BrokerOptions {
  verifier: CredentialVerifier;
  functionsRepo: FunctionsRepo;
  instances: Pick<InstancesService, 'setDemand' | 'retire'>;
  turn: Pick<TurnService, 'credentialsFor'>;
  log: Logger;
  settings: StreamingSettings;
  now?: () => Date;
}

interface Version {
  versionId: string;
  /** The function owner's account (metrics labels). */
  ncaId: string;
  name: string;
  description?: string;
  inferenceUrl: string;
}

type State = 'waiting' | 'granted' | 'connected' | 'detached';

interface Session {
  id: string;
  /** The caller's account: only it may continue or end the session. */
  ncaId: string;
  /** Whose credential started it, as the owner's session listing names it (never the secret). */
  subject: SessionSubject;
  functionId: string;
  /** The versions it may use, in order of preference. */
  candidates: Version[];
  state: State;
  joinedAt: number;
  version?: Version;
  instance?: ReadyInstance;
  grantedAt?: number;
  /** When its browser first connected. */
  connectedAt?: number;
  client?: Duplex;
  connectedOnce: boolean;
  /** The state's clock: abandoning a line nobody polls, an untaken grant, the resume window. */
  timer?: NodeJS.Timeout;
  /** When its browser dropped (detached), and when the resume window closes. */
  detachedAt?: number;
  resumeBy?: number;
  /** Long polls held until the session leaves the line. */
  waiters: Set<() => void>;
  polls: number;
}

export type Admission =
  | { status: 'GRANTED'; sessionId: string }
  | { status: 'WAITING'; sessionId: string; position: number; estimatedWaitSeconds?: number };

/** A waiting session nobody asked about for this long has left (its tab is gone). */
const ABANDON_MS = 10_000;
/** A container that could not take a session is asked again after this long. */
const RETRY_MS = 500;
/** The listing's names for the states: the stream's own words, not the broker's. */
const LISTED_STATE = { waiting: 'WAITING', granted: 'GRANTED', connected: 'STREAMING', detached: 'RESUMING' } as const;

export function createStreamingBroker(options: BrokerOptions) {
  const { log, settings } = options;
  const now = options.now ?? (() => new Date());
  const answerWithinMs = settings.answerWithinSeconds * 1000;
  const sessions = new Map<string, Session>();
  const line = createLine<Session>();
  const ready = new Map<string, ReadyInstance[]>();
  /** instanceId → the session on it; no session once retired, until placement drops the instance. */
  const claims = new Map<string, { versionId: string; session?: Session }>();
  /** instanceId → until when it is not offered again (its container could not take a session). */
  const resting = new Map<string, number>();
  /** versionId → what load() reports for it. */
  const seen = new Map<string, { ncaId: string; functionId: string; lastRequestAt?: number }>();
  /** functionId → mean session length (ms), for the wait estimate. */
  const meanSessionMs = new Map<string, number>();
  const changeListeners: (() => void)[] = [];
  const pipe = createSessionPipe(log);
  let pumping: Promise<void> | undefined;
  let pumpAgain = false;
  let retryTimer: NodeJS.Timeout | undefined;

  // ── who asks, for what ────────────────────────────────────────────────────────────────────────────

  const authenticate = (named: Named) => authorize(access.functions('invoke_function'), named.authorization, options.verifier);

  /** The STREAMING versions a new session may use: the one named, or any deployable one. */
  async function versionsFor(principal: Principal, functionId: string, versionId?: string): Promise<Version[]> {
    const rows = (await options.functionsRepo.listVersionsOf(principal.ncaId, functionId))
      .filter((row) => !versionId || row.version_id === versionId);
    if (rows.length === 0) throw notFound(`Function id '${functionId}'${versionId ? `, version '${versionId}'` : ''}: not found`);
    if (rows.every((row) => row.function_type !== 'STREAMING')) throw new Problem('bad-request', `Function id '${functionId}' is not a STREAMING function; invoke it with pexec`);
    const deployable = rows.filter((row) => row.function_type === 'STREAMING' && takesSessions(row.status));
    if (deployable.length === 0 && rows.some((row) => row.status === 'ERROR')) {
      throw new Problem('service-unavailable', `Function id '${functionId}' cannot start instances (status ERROR); try again later`, { headers: { 'retry-after': '30' } });
    }
    if (deployable.length === 0) throw notFound(`Function id '${functionId}' has no deployed STREAMING version`);
    return deployable.map((row) => {
      const document = documentOf(row);
      return { versionId: row.version_id, ncaId: row.nca_id, name: row.name, description: document.description, inferenceUrl: document.inferenceUrl };
    });
  }

  /** The session named by id, if the caller's account owns it; else 404 (clearing a stale cookie). */
  function find(principal: Principal, id: string): Session {
    const session = sessions.get(id);
    if (!session || session.ncaId !== principal.ncaId) {
      throw new Problem('not-found', 'No existing session found; start a new one (without svc-reqid or the svc-request-id cookie)', {
        headers: { 'set-cookie': CLEAR_SESSION_COOKIE },
      });
    }
    return session;
  }

  // ── the line ──────────────────────────────────────────────────────────────────────────────────────

  async function join(principal: Principal, named: Named): Promise<Session> {
    const { functionId, versionId } = targetOf(named);
    const candidates = await versionsFor(principal, functionId, versionId);
    if (line.length(functionId) >= settings.maxLineLength) {
      throw new Problem('service-unavailable', `Every instance of this function is in a session and ${settings.maxLineLength} people are waiting already; try again in a few minutes`, {
        headers: { 'retry-after': '60' },
      });
    }
    const session: Session = {
      id: randomUUID(), ncaId: principal.ncaId, functionId, candidates, state: 'waiting', joinedAt: Date.now(), connectedOnce: false,
      // Only tokens and API keys pass authenticate (access.functions).
      subject: { kind: principal.kind === 'token' ? 'token' : 'api-key', credentialId: principal.credentialId, ownerId: principal.ownerId },
      waiters: new Set(), polls: 0,
    };
    sessions.set(session.id, session);
    line.join(session);
    // Someone now waits: a dropped session of this function keeps its instance only the shorter window.
    for (const other of sessions.values()) if (other.state === 'detached' && other.functionId === functionId) armResumeWindow(other);
    const first = candidates[0];
    seen.set(first.versionId, { ncaId: first.ncaId, functionId, lastRequestAt: now().getTime() });
    changed();
    pump();
    return session;
  }

  /** Waits up to answerWithinSeconds for the session to leave the line; says where it stands. */
  async function admit(session: Session): Promise<Admission> {
    if (session.state === 'waiting') {
      const waitedMs = Date.now() - session.joinedAt;
      if (waitedMs >= settings.maxWaitSeconds * 1000) {
        finish(session, 'free');
        throw new Problem('service-unavailable', `No instance became free within ${settings.maxWaitSeconds} s; try again later`, { headers: { 'retry-after': '30' } });
      }
      clearTimeout(session.timer);
      session.polls++;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(wake, Math.min(answerWithinMs, settings.maxWaitSeconds * 1000 - waitedMs));
        function wake() {
          clearTimeout(timer);
          session.waiters.delete(wake);
          resolve();
        }
        session.waiters.add(wake);
      });
      session.polls--;
    }
    if (!sessions.has(session.id)) throw new Problem('not-found', 'The session ended while it waited', { headers: { 'set-cookie': CLEAR_SESSION_COOKIE } });
    if (session.state !== 'waiting') return { status: 'GRANTED', sessionId: session.id };
    if (session.polls === 0) session.timer = setTimeout(() => finish(session, 'free'), ABANDON_MS);
    const position = line.position(session);
    return { status: 'WAITING', sessionId: session.id, position, estimatedWaitSeconds: estimate(session, position) };
  }

  /** Rough: the sessions ahead, shared among the function's instances, times its mean session length. */
  function estimate(session: Session, position: number): number | undefined {
    const mean = meanSessionMs.get(session.functionId);
    if (mean === undefined) return undefined;
    const instances = session.candidates.reduce((sum, version) => sum + (ready.get(version.versionId)?.length ?? 0), 0);
    return Math.ceil((Math.ceil(position / Math.max(1, instances)) * mean) / 1000);
  }

  /** Offers free instances to the people in line, in order; one pass at a time. */
  function pump() {
    if (pumping) {
      pumpAgain = true;
      return;
    }
    pumping = (async () => {
      do {
        pumpAgain = false;
        for (const waiting of line.snapshot()) {
          for (const session of waiting) await offerTo(session);
        }
      } while (pumpAgain);
    })().catch((error) => log.error({ err: error }, 'streaming line failed')).finally(() => {
      pumping = undefined;
      // Containers that could not take a session now are asked again shortly.
      if (!line.empty && !retryTimer) {
        retryTimer = setTimeout(() => {
          retryTimer = undefined;
          pump();
        }, RETRY_MS);
        retryTimer.unref();
      }
    });
  }

  async function offerTo(session: Session) {
    for (const version of session.candidates) {
      for (const instance of ready.get(version.versionId) ?? []) {
        if (session.state !== 'waiting') return;
        if (claims.has(instance.instanceId) || (resting.get(instance.instanceId) ?? 0) > Date.now()) continue;
        if (await tryGrant(session, version, instance)) return;
      }
    }
  }

  async function tryGrant(session: Session, version: Version, instance: ReadyInstance): Promise<boolean> {
    const { instanceId } = instance;
    claims.set(instanceId, { versionId: version.versionId, session });
    let taken = false;
    try {
      if (await readinessOf(instance) === 'ready') {
        const credentials = credentialsFor(instance, options.turn.credentialsFor(session.id, now()));
        if (credentials) await pushCredentials(instance, credentials);
        taken = true;
      }
    } catch (error) {
      log.warn({ instanceId, err: (error as Error).message }, 'streaming instance did not take credentials');
    }
    const stillThere = (ready.get(version.versionId) ?? []).some((candidate) => candidate.instanceId === instanceId);
    if (!taken || !stillThere || session.state !== 'waiting') {
      if (claims.get(instanceId)?.session === session) claims.delete(instanceId);
      if (!taken) resting.set(instanceId, Date.now() + RETRY_MS);
      return false;
    }
    grant(session, version, instance);
    return true;
  }

  function grant(session: Session, version: Version, instance: ReadyInstance) {
    line.leave(session);
    clearTimeout(session.timer);
    Object.assign(session, { state: 'granted', version, instance, grantedAt: Date.now() });
    session.timer = setTimeout(() => {
      log.info({ sessionId: session.id, instanceId: instance.instanceId }, 'streaming grant not taken; the instance goes to the next in line');
      finish(session, 'free');
    }, settings.grantSeconds * 1000);
    for (const wake of [...session.waiters]) wake();
    log.info({ sessionId: session.id, instanceId: instance.instanceId, versionId: version.versionId, waitedMs: Date.now() - session.joinedAt }, 'streaming session granted');
    changed();
  }

  // ── the connection ────────────────────────────────────────────────────────────────────────────────

  function connect(req: IncomingMessage, socket: Duplex, head: Buffer, session: Session, items: string[]) {
    const instance = session.instance!;
    const resumed = session.connectedOnce;
    pipe.connect(req, socket, head, {
      sessionId: session.id, host: instance.endpoint.host, port: instance.endpoint.ports.streaming ?? instance.endpoint.ports.inference,
      path: session.version!.inferenceUrl, items,
      onOpen: (client) => attach(session, client, resumed),
      onFailed: () => {
        if (resumed || !sessions.has(session.id)) return;
        resting.set(instance.instanceId, Date.now() + RETRY_MS);
        finish(session, 'free');
      },
    });
  }

  function attach(session: Session, client: Duplex, resumed: boolean) {
    if (!sessions.has(session.id)) return void client.destroy();
    clearTimeout(session.timer);
    if (session.client && session.client !== client) session.client.destroy();
    Object.assign(session, { client, state: 'connected', connectedOnce: true, connectedAt: session.connectedAt ?? Date.now(), detachedAt: undefined, resumeBy: undefined });
    client.once('close', () => void clientGone(session, client));
    log.info({ sessionId: session.id, instanceId: session.instance!.instanceId, resumed }, 'streaming session connected');
  }

  /** The browser's socket closed: the container says whether that ended the session or dropped it. */
  async function clientGone(session: Session, client: Duplex) {
    if (session.client !== client || !sessions.has(session.id)) return;
    session.client = undefined;
    const readiness = await readinessOf(session.instance!);
    if (!sessions.has(session.id) || session.client) return;
    log.info({ sessionId: session.id, instanceId: session.instance!.instanceId, container: readiness }, 'streaming connection closed');
    if (readiness === 'ready') return finish(session, 'free');
    if (readiness !== 'busy') return finish(session, 'retire');
    session.state = 'detached';
    session.detachedAt = Date.now();
    armResumeWindow(session);
  }

  /** The full window, or the shorter one while someone waits for the same function. */
  function armResumeWindow(session: Session) {
    const seconds = line.length(session.functionId) > 0 ? Math.min(settings.busyResumeWindowSeconds, settings.resumeWindowSeconds) : settings.resumeWindowSeconds;
    const resumeBy = (session.detachedAt ?? Date.now()) + seconds * 1000;
    if (session.resumeBy !== undefined && session.resumeBy <= resumeBy) return;
    session.resumeBy = resumeBy;
    clearTimeout(session.timer);
    session.timer = setTimeout(() => finish(session, 'retire'), Math.max(0, resumeBy - Date.now()));
  }

  /**
   * Ends a session. Its instance is `free` for the next person (its container never started a session),
   * or `retire`d: stopped, and a fresh one takes its place (spec 4.6: one session per container).
   */
  function finish(session: Session, instanceFate: 'free' | 'retire') {
    if (!sessions.delete(session.id)) return;
    clearTimeout(session.timer);
    line.leave(session);
    for (const wake of [...session.waiters]) wake();
    // A connected browser keeps its socket: the retired container says bye on it as it stops.
    const { instance, version } = session;
    if (instance && version) {
      if (session.connectedOnce && session.grantedAt !== undefined) remember(session.functionId, Date.now() - session.grantedAt);
      if (instanceFate === 'free') {
        claims.delete(instance.instanceId);
      } else {
        claims.set(instance.instanceId, { versionId: version.versionId });
        void options.instances.retire(instance.instanceId).catch((error) => log.warn({ err: error, instanceId: instance.instanceId }, 'could not retire a streaming instance'));
      }
    }
    log.info({ sessionId: session.id, state: session.state, instance: instance ? instanceFate : undefined }, 'streaming session ended');
    changed();
    pump();
  }

  function remember(functionId: string, ms: number) {
    const mean = meanSessionMs.get(functionId);
    meanSessionMs.set(functionId, mean === undefined ? ms : 0.7 * mean + 0.3 * ms);
  }

  /** Placement hears of people waiting (waking a version from zero); the autoscaler of sessions. */
  function changed() {
    for (const [versionId, load] of loads()) options.instances.setDemand(versionId, load.queued + load.inflight);
    for (const listener of changeListeners) listener();
  }

  /** A session as its function's owner reads it: who, since when, where it stands. */
  function listed(session: Session): StreamingSession {
    const iso = (ms: number) => new Date(ms).toISOString();
    return {
      sessionId: session.id, state: LISTED_STATE[session.state], subject: session.subject, joinedAt: iso(session.joinedAt),
      ...(session.state === 'waiting' ? { position: line.position(session) } : {}),
      ...(session.instance ? { instanceId: session.instance.instanceId, versionId: session.version!.versionId } : {}),
      ...(session.grantedAt === undefined ? {} : { grantedAt: iso(session.grantedAt) }),
      ...(session.connectedAt === undefined ? {} : { connectedAt: iso(session.connectedAt) }),
      ...(session.resumeBy === undefined ? {} : { resumeBy: iso(session.resumeBy) }),
    };
  }

  function loads(): Map<string, FunctionLoad> {
    const out = new Map<string, FunctionLoad>();
    for (const [versionId, { ncaId, functionId, lastRequestAt }] of seen) out.set(versionId, { ncaId, functionId, versionId, queued: 0, inflight: 0, lastRequestAt });
    for (const session of sessions.values()) {
      const versionId = session.version?.versionId ?? session.candidates[0].versionId;
      const load = out.get(versionId);
      if (!load) continue;
      if (session.state === 'waiting') load.queued++;
      else load.inflight++;
    }
    return out;
  }

  return {
    /** Placement's view of a version's ready instances. Sessions on instances that left it are over. */
    ready(versionId: string, instances: ReadyInstance[]) {
      if (instances.length) ready.set(versionId, instances);
      else ready.delete(versionId);
      const present = new Set(instances.map((instance) => instance.instanceId));
      for (const [instanceId, claim] of claims) {
        if (claim.versionId !== versionId || present.has(instanceId)) continue;
        claims.delete(instanceId);
        if (claim.session?.instance?.instanceId === instanceId) finish(claim.session, 'free');
      }
      pump();
    },

    /** A WebSocket upgrade on the api host that is not an agent link: a streaming session. */
    async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer) {
      const named = namedBy(req);
      try {
        const principal = await authenticate(named);
        const session = named.session ? find(principal, named.session.id) : await join(principal, named);
        const admission = await admit(session);
        if (admission.status === 'WAITING') {
          // A place in line outlives a request only for the sign-in, whose answer can carry it back.
          if (!named.session) finish(session, 'free');
          throw new Problem('service-unavailable', `Every instance is in a session (#${admission.position} in line); to keep a place in line, sign in first (POST with X-SVC-ABSORB: true)`, {
            headers: { 'retry-after': '1' },
          });
        }
        connect(req, socket, head, session, named.items);
      } catch (error) {
        const problem = error instanceof Problem ? error : new Problem('internal', 'The session could not be started');
        if (!(error instanceof Problem)) log.error({ err: error }, 'streaming session failed');
        rejectUpgrade(req, socket, problem);
      }
    },

    /**
     * Sign-in POST: a new session in line, or (header svc-reqid) the one being waited for. The cookie
     * alone never continues a wait: a browser's tabs share it, and POST replaces a stale one.
     */
    async signIn(named: Named): Promise<Admission> {
      const principal = await authenticate(named);
      if (!named.session?.explicit) return admit(await join(principal, named));
      const session = find(principal, named.session.id);
      if (session.state === 'connected' || session.state === 'detached') {
        throw new Problem('conflict', 'This session is connected already; end it (DELETE) or start a new one without svc-reqid');
      }
      return admit(session);
    },

    /** Sign-out (DELETE): the named session ends wherever it is; a started one's instance is replaced. */
    async signOut(named: Named): Promise<string> {
      const principal = await authenticate(named);
      if (!named.session) throw new Problem('not-found', 'No session named: send header svc-reqid or the svc-request-id cookie');
      const session = find(principal, named.session.id);
      finish(session, session.connectedOnce ? 'retire' : 'free');
      return session.id;
    },

    /** What a start screen shows: the function's name, instances free now, people waiting. */
    async describe(named: Named) {
      const principal = await authenticate(named);
      const { functionId, versionId } = targetOf(named);
      const versions = await versionsFor(principal, functionId, versionId);
      const instances = versions.flatMap((version) => ready.get(version.versionId) ?? []);
      return {
        functionId, name: versions[0].name, description: versions[0].description, instances: instances.length,
        free: instances.filter((instance) => !claims.has(instance.instanceId)).length, waiting: line.length(functionId),
      };
    },

    /** Sessions and people waiting per version, as the load gauges and the autoscaler read them. */
    load: (): Iterable<FunctionLoad> => loads().values(),

    /**
     * The sessions of a version (granted one of its instances, or waiting for any version that includes
     * it): those holding an instance first, then the line in order.
     */
    sessionsOf(versionId: string): StreamingSession[] {
      const of = [...sessions.values()].filter((session) => (session.version
        ? session.version.versionId === versionId
        : session.candidates.some((candidate) => candidate.versionId === versionId)));
      const holding = of.filter((session) => session.state !== 'waiting');
      const waiting = of.filter((session) => session.state === 'waiting').sort((a, b) => line.position(a) - line.position(b));
      return [...holding, ...waiting].map(listed);
    },

    /** Whether an instance holds a session (placement scales down idle instances first). */
    inSession: (instanceId: string) => claims.has(instanceId),

    /** Called when sessions start or end or people join or leave a line. */
    onChange(listener: () => void) {
      changeListeners.push(listener);
    },

    /** Sessions now (waiting included), for tests and metrics. */
    sessionCount: () => sessions.size,

    close() {
      clearTimeout(retryTimer);
      for (const session of sessions.values()) {
        clearTimeout(session.timer);
        session.client?.destroy();
        for (const wake of [...session.waiters]) wake();
      }
      sessions.clear();
      pipe.close();
    },
  };
}

export type StreamingBroker = ReturnType<typeof createStreamingBroker>;
