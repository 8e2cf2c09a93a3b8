// Admission: where a session stands, answered within settings.answerWithinSeconds. A sign-in or upgrade
// that finds the session waiting is held until it is granted an instance or the answer is due, then told
// its place in line; nobody waits longer than settings.maxWaitSeconds in all.
import { Problem } from '../domain/problem.ts';
import type { Line } from './line.ts';
import { CLEAR_SESSION_COOKIE } from './pipe.ts';
import type { InstanceFate } from './ready-instances.ts';
import type { Session } from './session.ts';
import type { StreamingSettings } from './settings.ts';

export type Admission =
  | { status: 'GRANTED'; sessionId: string }
  | { status: 'WAITING'; sessionId: string; position: number; estimatedWaitSeconds?: number };

export interface AdmissionOptions {
  settings: StreamingSettings;
  line: Line<Session>;
  /** Seconds until `position` in line gets an instance, when there is an estimate. */
  estimate(session: Session, position: number): number | undefined;
  end(session: Session, fate: InstanceFate): void;
}

export function createAdmission({ settings, line, estimate, end }: AdmissionOptions) {
  const answerWithinMs = settings.answerWithinSeconds * 1000;
  const maxWaitMs = settings.maxWaitSeconds * 1000;

  async function holdInLine(session: Session) {
    const waitedMs = Date.now() - session.joinedAt;
    if (waitedMs >= maxWaitMs) {
      end(session, 'free');
      throw new Problem('service-unavailable', `No instance became free within ${settings.maxWaitSeconds} s; try again later`, { headers: { 'retry-after': '30' } });
    }
    await session.poll(Math.min(answerWithinMs, maxWaitMs - waitedMs));
  }

  /** Waits up to answerWithinSeconds for the session to leave the line; says where it stands. */
  return async function admit(session: Session): Promise<Admission> {
    if (session.state === 'waiting') await holdInLine(session);
    if (session.ended) throw new Problem('not-found', 'The session ended while it waited', { headers: { 'set-cookie': CLEAR_SESSION_COOKIE } });
    if (session.state !== 'waiting') return { status: 'GRANTED', sessionId: session.id };
    const position = line.position(session);
    return { status: 'WAITING', sessionId: session.id, position, estimatedWaitSeconds: estimate(session, position) };
  };
}
