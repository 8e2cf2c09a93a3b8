// Granting: the head of each line gets the next instance that is ready and has no session. Before the
// grant its container confirms a session can start there (/v1/streaming/ready) and is handed the
// session's STUN/TURN credentials; one that cannot take a session now rests and is asked again shortly.
import type { ReadyInstance } from '../control/instances/service.ts';
import type { Logger } from '../logger.ts';
import type { TurnService } from '../turn/server.ts';
import { credentialsFor, pushCredentials, readinessOf } from './container.ts';
import type { Line } from './line.ts';
import { RETRY_MS, type ReadyInstances } from './ready-instances.ts';
import type { Session } from './session.ts';
import type { Version } from './versions.ts';

export interface GranterOptions {
  line: Line<Session>;
  instances: ReadyInstances;
  turn: Pick<TurnService, 'credentialsFor'>;
  now: () => Date;
  log: Logger;
  /** How long a granted instance waits for its WebSocket. */
  takeWithinMs: number;
  /** Called after each grant. */
  granted(): void;
}

export function createGranter(options: GranterOptions) {
  const { line, instances, log } = options;
  let passing: Promise<void> | undefined;
  let passAgain = false;
  let retryTimer: NodeJS.Timeout | undefined;

  /** Offers free instances to the people in line, in order; one pass at a time. */
  function offer() {
    if (passing) {
      passAgain = true;
      return;
    }
    passing = passes().catch((error) => log.error({ err: error }, 'streaming line failed')).finally(() => {
      passing = undefined;
      retryLater();
    });
  }

  async function passes() {
    do {
      passAgain = false;
      for (const waiting of line.snapshot()) {
        for (const session of waiting) await offerTo(session);
      }
    } while (passAgain);
  }

  /** Containers that could not take a session now are asked again shortly. */
  function retryLater() {
    if (line.empty || retryTimer) return;
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      offer();
    }, RETRY_MS);
    retryTimer.unref();
  }

  async function offerTo(session: Session) {
    for (const version of session.candidates) {
      for (const instance of instances.of(version.versionId)) {
        if (session.state !== 'waiting') return;
        if (instances.offerable(instance.instanceId) && await tryGrant(session, version, instance)) return;
      }
    }
  }

  async function tryGrant(session: Session, version: Version, instance: ReadyInstance): Promise<boolean> {
    instances.claim(instance.instanceId, version.versionId, session);
    const taken = await takesSession(instance, session.id);
    // The instance or the session may have gone while its container was asked.
    if (!taken || !instances.includes(version.versionId, instance.instanceId) || session.state !== 'waiting') {
      instances.withdraw(instance.instanceId, session);
      if (!taken) instances.rest(instance.instanceId);
      return false;
    }
    line.leave(session);
    session.grant(version, instance, options.takeWithinMs);
    log.info({ sessionId: session.id, instanceId: instance.instanceId, versionId: version.versionId, waitedMs: Date.now() - session.joinedAt }, 'streaming session granted');
    options.granted();
    return true;
  }

  /** Whether its container takes a session now: it is ready, and has the session's credentials. */
  async function takesSession(instance: ReadyInstance, sessionId: string): Promise<boolean> {
    try {
      if (await readinessOf(instance) !== 'ready') return false;
      const credentials = credentialsFor(instance, options.turn.credentialsFor(sessionId, options.now()));
      if (credentials) await pushCredentials(instance, credentials);
      return true;
    } catch (error) {
      log.warn({ instanceId: instance.instanceId, err: (error as Error).message }, 'streaming instance did not take credentials');
      return false;
    }
  }

  return {
    offer,
    close() {
      clearTimeout(retryTimer);
    },
  };
}
