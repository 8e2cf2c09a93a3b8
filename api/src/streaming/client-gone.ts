// When a session's browser socket closes, its container says what that was (spec 4.6):
//   ready again: it never said hello, so its instance is free for the next at once;
//   busy: a drop; the session is detached and its instance waits for the browser within the resume window;
//   over, or no answer: the session ended; its instance is retired and a fresh one replaces it.
import type { Duplex } from 'node:stream';
import type { Logger } from '../logger.ts';
import { readinessOf } from './container.ts';
import type { InstanceFate } from './ready-instances.ts';
import type { Session } from './session.ts';
import type { StreamingSettings } from './settings.ts';

/** The full resume window, or the shorter one while someone waits in line for the same function. */
export function resumeWindowMs(settings: StreamingSettings, someoneWaits: boolean): number {
  const seconds = someoneWaits ? Math.min(settings.busyResumeWindowSeconds, settings.resumeWindowSeconds) : settings.resumeWindowSeconds;
  return seconds * 1000;
}

export interface ClientGoneOptions {
  log: Logger;
  /** The resume window for a session of the function now. */
  resumeWindowMs(functionId: string): number;
  end(session: Session, fate: InstanceFate): void;
}

/** What the broker does when `client`, a session's browser socket, closes. */
export function whenClientGoes(options: ClientGoneOptions) {
  return async (session: Session, client: Duplex) => {
    if (!session.clientClosed(client)) return;
    const instance = session.instance!;
    const readiness = await readinessOf(instance);
    // Ended meanwhile, or its browser came back.
    if (session.ended || session.client) return;
    options.log.info({ sessionId: session.id, instanceId: instance.instanceId, container: readiness }, 'streaming connection closed');
    if (readiness === 'ready') return options.end(session, 'free');
    if (readiness !== 'busy') return options.end(session, 'retire');
    session.detach(options.resumeWindowMs(session.functionId));
  };
}
