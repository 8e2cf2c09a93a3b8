// The streaming sessions as load per version: people waiting (queued) and sessions holding an instance
// (inflight), as placement's demand, the load gauges and the autoscaler read them.
import type { FunctionLoad } from '../domain/load.ts';
import type { Session } from './session.ts';

export class SessionLoad {
  /** versionId → what is reported for it: every version a session asked for first, from then on. */
  readonly #seen = new Map<string, { ncaId: string; functionId: string; lastRequestAt?: number }>();

  /** A new session asks for its first candidate at `at` (ms since epoch). */
  asked(session: Session, at: number) {
    const first = session.candidates[0];
    this.#seen.set(first.versionId, { ncaId: first.ncaId, functionId: session.functionId, lastRequestAt: at });
  }

  /** Each seen version's load from `sessions`: a session counts for the version it holds, else its first candidate. */
  of(sessions: Iterable<Session>): Map<string, FunctionLoad> {
    const out = new Map<string, FunctionLoad>();
    for (const [versionId, { ncaId, functionId, lastRequestAt }] of this.#seen) out.set(versionId, { ncaId, functionId, versionId, queued: 0, inflight: 0, lastRequestAt });
    for (const session of sessions) {
      const load = out.get(session.version?.versionId ?? session.candidates[0].versionId);
      if (!load) continue;
      if (session.state === 'waiting') load.queued++;
      else load.inflight++;
    }
    return out;
  }
}
