// The streaming session broker (spec 4.6, 4.7; wire-reference 9). People who want a session of a
// STREAMING function queue in a fair line per function; the head of the line gets the next instance
// that is ready and has no session (the container confirms on /v1/streaming/ready and is handed the
// session's STUN/TURN credentials); then the browser's WebSocket is piped to it. A session's states
// are in session.ts; this file composes the parts and is what main.ts and sign-in.ts talk to.
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
import { Problem } from '../domain/problem.ts';
import { rejectUpgrade } from '../http/upgrade.ts';
import type { Logger } from '../logger.ts';
import type { FunctionsRepo } from '../control/functions/repo.ts';
import type { InstancesService, ReadyInstance } from '../control/instances/service.ts';
import type { TurnService } from '../turn/server.ts';
import { createAdmission } from './admission.ts';
import { resumeWindowMs } from './client-gone.ts';
import { createConnections } from './connection.ts';
import { createGranter } from './grant.ts';
import { createLine } from './line.ts';
import { SessionLoad } from './load.ts';
import { CLEAR_SESSION_COOKIE } from './pipe.ts';
import { ReadyInstances, type InstanceFate } from './ready-instances.ts';
import { namedBy, targetOf, type Named } from './request.ts';
import { Session, type Expiry } from './session.ts';
import type { SessionRecord, SessionRecords } from './session-records.ts';
import { CarriedSessions } from './carried-sessions.ts';
import type { SessionSubject, StreamingSession } from './sessions.ts';
import type { StreamingSettings } from './settings.ts';
import { streamableVersions } from './versions.ts';
import { WaitEstimate } from './wait-estimate.ts';

export type { Admission } from './admission.ts';

export interface BrokerOptions {
  verifier: CredentialVerifier;
  functionsRepo: FunctionsRepo;
  instances: Pick<InstancesService, 'setDemand' | 'retire'>;
  turn: Pick<TurnService, 'credentialsFor'>;
  log: Logger;
  settings: StreamingSettings;
  /** Where started sessions are kept for the broker that takes over (placement's next holder). */
  records?: SessionRecords;
  now?: () => Date;
}

export function createStreamingBroker(options: BrokerOptions) {
  const { log, settings } = options;
  const now = options.now ?? (() => new Date());
  const sessions = new Map<string, Session>();
  const line = createLine<Session>();
  const readyInstances = new ReadyInstances((instanceId) => options.instances.retire(instanceId), log);
  const load = new SessionLoad();
  const waits = new WaitEstimate();
  const changeListeners: (() => void)[] = [];
  const granter = createGranter({ line, instances: readyInstances, turn: options.turn, now, log, takeWithinMs: settings.grantSeconds * 1000, granted: changed });
  const admit = createAdmission({
    settings, line, end: finish,
    estimate: (session, position) => waits.secondsFor(session.functionId, position, readyInstances.ofAny(session.candidates).length),
  });
  const windowFor = (functionId: string) => resumeWindowMs(settings, line.length(functionId) > 0);
  const carried = new CarriedSessions(options.records, log);
  const connections = createConnections({ log, instances: readyInstances, resumeWindowMs: windowFor, end: finish, started: (session) => carried.keep(session) });

  const authenticate = (named: Named) => authorize(access.functions('invoke_function'), named.authorization, options.verifier);

  /** The session named by id, if the caller's account owns it; else 404 (clearing a stale cookie). */
  function find(principal: Principal, id: string): Session {
    const session = sessions.get(id);
    if (!session && carried.waiting(id, principal.ncaId)) {
      throw new Problem('service-unavailable', 'This session is being taken over by another API replica; try again in a moment', { headers: { 'retry-after': '1' } });
    }
    if (!session || session.ncaId !== principal.ncaId) {
      throw new Problem('not-found', 'No existing session found; start a new one (without svc-reqid or the svc-request-id cookie)', {
        headers: { 'set-cookie': CLEAR_SESSION_COOKIE },
      });
    }
    return session;
  }

  async function join(principal: Principal, named: Named): Promise<Session> {
    const { functionId, versionId } = targetOf(named);
    const candidates = await streamableVersions(options.functionsRepo, principal, functionId, versionId);
    if (line.length(functionId) >= settings.maxLineLength) {
      throw new Problem('service-unavailable', `Every instance of this function is in a session and ${settings.maxLineLength} people are waiting already; try again in a few minutes`, {
        headers: { 'retry-after': '60' },
      });
    }
    // Only tokens and API keys pass authenticate (access.functions).
    const subject: SessionSubject = { kind: principal.kind === 'token' ? 'token' : 'api-key', credentialId: principal.credentialId, ownerId: principal.ownerId };
    const session = new Session({ id: randomUUID(), ncaId: principal.ncaId, subject, functionId, candidates }, expired);
    sessions.set(session.id, session);
    line.join(session);
    // Someone now waits: a dropped session of this function keeps its instance only the shorter window.
    for (const other of sessions.values()) if (other.state === 'detached' && other.functionId === functionId) other.resumeWithin(windowFor(functionId));
    load.asked(session, now().getTime());
    changed();
    granter.offer();
    return session;
  }

  function expired(session: Session, expiry: Expiry) {
    if (expiry === 'untaken') log.info({ sessionId: session.id, instanceId: session.instance?.instanceId }, 'streaming grant not taken; the instance goes to the next in line');
    finish(session, expiry === 'unresumed' ? 'retire' : 'free');
  }

  /** A session the broker before this one started, on an instance placement reports ready here. */
  function carryOn(record: SessionRecord, instance: ReadyInstance) {
    const { id, ncaId, subject, functionId, version, joinedAt } = record;
    const session = new Session({ id, ncaId, subject, functionId, candidates: [version], joinedAt }, expired);
    session.carryOn(version, instance, record, windowFor(functionId));
    sessions.set(id, session);
    readyInstances.claim(instance.instanceId, version.versionId, session);
    log.info({ sessionId: id, instanceId: instance.instanceId }, 'streaming session carried on from the previous broker; its browser may come back');
    changed();
  }

  /** Ends every session here, their browsers' sockets too, but keeps what the store holds of them for the next broker. */
  function letGo() {
    carried.clear();
    for (const session of sessions.values()) {
      line.leave(session);
      if (session.instance) readyInstances.withdraw(session.instance.instanceId, session);
      session.end();
      session.client?.destroy();
    }
    sessions.clear();
  }

  /** Ends a session wherever it stands; its instance, if it had one, goes as `fate` says. */
  function finish(session: Session, fate: InstanceFate) {
    if (session.ended) return;
    const { state, instance, version } = session;
    if (session.connectedOnce) carried.forget(session.id);
    session.end();
    sessions.delete(session.id);
    line.leave(session);
    if (instance && version) {
      if (session.connectedOnce && session.grantedAt !== undefined) waits.ended(session.functionId, Date.now() - session.grantedAt);
      readyInstances.release(instance.instanceId, version.versionId, fate);
    }
    log.info({ sessionId: session.id, state, instance: instance ? fate : undefined }, 'streaming session ended');
    changed();
    granter.offer();
  }

  /** Placement hears of people waiting (waking a version from zero); the autoscaler of sessions. */
  function changed() {
    for (const [versionId, versionLoad] of load.of(sessions.values())) options.instances.setDemand(versionId, versionLoad.queued + versionLoad.inflight);
    for (const listener of changeListeners) listener();
  }

  return {
    /** Placement's view of a version's ready instances. Sessions on instances that left it are over. */
    ready(versionId: string, instances: ReadyInstance[]) {
      for (const instance of instances) {
        const record = carried.take(instance.instanceId, versionId);
        if (record) carryOn(record, instance);
      }
      for (const session of readyInstances.report(versionId, instances)) finish(session, 'free');
      granter.offer();
    },

    /**
     * Placement runs here from now on (before its first round): the sessions the broker before this one
     * started are carried on as their instances are reported ready; those whose instance is not within the
     * resume window are over.
     */
    lead: () => carried.load((sessionId) => sessions.has(sessionId), settings.resumeWindowSeconds * 1000),

    /** Placement has moved to another replica, whose broker carries the sessions on: they are let go here. */
    follow() {
      letGo();
      changed();
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
        connections.connect(req, socket, head, session, named.items);
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
    async signIn(named: Named) {
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
      const versions = await streamableVersions(options.functionsRepo, principal, functionId, versionId);
      const instances = readyInstances.ofAny(versions);
      return {
        functionId, name: versions[0].name, description: versions[0].description, instances: instances.length,
        free: instances.filter((instance) => !readyInstances.inSession(instance.instanceId)).length, waiting: line.length(functionId),
      };
    },

    /** Sessions and people waiting per version, as the load gauges and the autoscaler read them. */
    load: (): Iterable<FunctionLoad> => load.of(sessions.values()).values(),

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
      return [...holding, ...waiting].map((session) => session.listed(line.position(session)));
    },

    /** Whether an instance holds a session (placement scales down idle instances first). */
    inSession: (instanceId: string) => readyInstances.inSession(instanceId),

    /** Called when sessions start or end or people join or leave a line. */
    onChange(listener: () => void) {
      changeListeners.push(listener);
    },

    /** Sessions now (waiting included), for tests and metrics. */
    sessionCount: () => sessions.size,

    /** Started sessions stay kept in the store: the next broker carries them on. */
    close() {
      granter.close();
      letGo();
      connections.close();
    },
  };
}

export type StreamingBroker = ReturnType<typeof createStreamingBroker>;
