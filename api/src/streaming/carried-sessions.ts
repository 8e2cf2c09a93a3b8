// What a broker keeps of its started sessions for the broker after it (placement's next holder, or this
// replica after a restart), and what it carries on of the one before: the stored records (session-records.ts),
// by instance, until placement reports the instance ready here or the resume window closes.
import type { Logger } from '../logger.ts';
import type { Session } from './session.ts';
import type { SessionRecord, SessionRecords } from './session-records.ts';

export class CarriedSessions {
  readonly #records: SessionRecords | undefined;
  readonly #log: Logger;
  /** Records of the broker before, by instance id, not yet carried on. */
  readonly #byInstance = new Map<string, SessionRecord>();
  #expiry: NodeJS.Timeout | undefined;

  constructor(records: SessionRecords | undefined, log: Logger) {
    this.#records = records;
    this.#log = log;
  }

  /** A session's browser connected for the first time: it is kept. */
  keep(session: Session) {
    const { id, ncaId, subject, functionId, version, instance, joinedAt, grantedAt, connectedAt } = session;
    const record = { id, ncaId, subject, functionId, version: version!, instanceId: instance!.instanceId, joinedAt, grantedAt: grantedAt!, connectedAt: connectedAt! };
    this.#records?.save(record).catch((error) => this.#log.warn({ err: error, sessionId: id }, 'could not keep a streaming session for a take-over'));
  }

  /** A kept session ended. */
  forget(sessionId: string) {
    this.#records?.delete(sessionId).catch((error) => this.#log.warn({ err: error, sessionId }, 'could not forget a kept streaming session'));
  }

  /** Reads the kept sessions (but those `live` here); any not taken within `windowMs` is over and forgotten. */
  async load(live: (sessionId: string) => boolean, windowMs: number) {
    if (!this.#records) return;
    for (const record of await this.#records.list()) if (!live(record.id)) this.#byInstance.set(record.instanceId, record);
    clearTimeout(this.#expiry);
    this.#expiry = setTimeout(() => {
      for (const record of this.#byInstance.values()) this.forget(record.id);
      this.#byInstance.clear();
    }, windowMs);
    this.#expiry.unref();
  }

  /** The record of the session on a ready instance of `versionId`, taken out to be carried on. */
  take(instanceId: string, versionId: string): SessionRecord | undefined {
    const record = this.#byInstance.get(instanceId);
    if (record?.version.versionId !== versionId) return undefined;
    this.#byInstance.delete(instanceId);
    return record;
  }

  /** Whether the account's session is still to be carried on (its instance not reported yet). */
  waiting(sessionId: string, ncaId: string): boolean {
    return [...this.#byInstance.values()].some((record) => record.id === sessionId && record.ncaId === ncaId);
  }

  clear() {
    clearTimeout(this.#expiry);
    this.#byInstance.clear();
  }
}
