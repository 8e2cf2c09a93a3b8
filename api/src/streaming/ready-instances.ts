// The streaming instances placement reports ready, per version, as the broker hands them out: each holds
// at most one session, claimed from the moment it is offered; one whose container could not take a
// session rests a moment before it is offered again; one whose session started is retired when it ends
// (spec 4.6: one session per container) and stays claimed until placement drops it.
import type { ReadyInstance } from '../control/instances/service.ts';
import type { Logger } from '../logger.ts';
import type { Session } from './session.ts';
import type { Version } from './versions.ts';

/** A container that could not take a session is asked again after this long. */
export const RETRY_MS = 500;

/** What becomes of an ended session's instance: free for the next (its container never started a session), or retired. */
export type InstanceFate = 'free' | 'retire';

export class ReadyInstances {
  readonly #ready = new Map<string, ReadyInstance[]>();
  /** instanceId → the session on it; no session once retired, until placement drops the instance. */
  readonly #claims = new Map<string, { versionId: string; session?: Session }>();
  /** instanceId → until when it is not offered again. */
  readonly #resting = new Map<string, number>();
  readonly #retire: (instanceId: string) => Promise<void>;
  readonly #log: Logger;

  constructor(retire: (instanceId: string) => Promise<void>, log: Logger) {
    this.#retire = retire;
    this.#log = log;
  }

  /** Placement's list for a version; returns the sessions whose instance left it (they are over). */
  report(versionId: string, instances: ReadyInstance[]): Session[] {
    if (instances.length) this.#ready.set(versionId, instances);
    else this.#ready.delete(versionId);
    const present = new Set(instances.map((instance) => instance.instanceId));
    const orphaned: Session[] = [];
    for (const [instanceId, claim] of this.#claims) {
      if (claim.versionId !== versionId || present.has(instanceId)) continue;
      this.#claims.delete(instanceId);
      if (claim.session?.instance?.instanceId === instanceId) orphaned.push(claim.session);
    }
    return orphaned;
  }

  of(versionId: string): ReadyInstance[] {
    return this.#ready.get(versionId) ?? [];
  }

  /** The ready instances of any of `versions`. */
  ofAny(versions: Version[]): ReadyInstance[] {
    return versions.flatMap((version) => this.of(version.versionId));
  }

  includes(versionId: string, instanceId: string): boolean {
    return this.of(versionId).some((instance) => instance.instanceId === instanceId);
  }

  /** Whether it holds a session (or is being offered to one, or retires). */
  inSession(instanceId: string): boolean {
    return this.#claims.has(instanceId);
  }

  offerable(instanceId: string): boolean {
    return !this.#claims.has(instanceId) && (this.#resting.get(instanceId) ?? 0) <= Date.now();
  }

  /** Offered to `session`: no one else is offered it meanwhile. */
  claim(instanceId: string, versionId: string, session: Session) {
    this.#claims.set(instanceId, { versionId, session });
  }

  /** The offer to `session` came to nothing; the instance is offered again (if no one else holds it by now). */
  withdraw(instanceId: string, session: Session) {
    if (this.#claims.get(instanceId)?.session === session) this.#claims.delete(instanceId);
  }

  /** Its container could not take a session: not offered for RETRY_MS. */
  rest(instanceId: string) {
    this.#resting.set(instanceId, Date.now() + RETRY_MS);
  }

  /** Its session ended. */
  release(instanceId: string, versionId: string, fate: InstanceFate) {
    if (fate === 'free') return void this.#claims.delete(instanceId);
    this.#claims.set(instanceId, { versionId });
    void this.#retire(instanceId).catch((error) => this.#log.warn({ err: error, instanceId }, 'could not retire a streaming instance'));
  }
}
