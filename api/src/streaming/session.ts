// One streaming session and its life (spec 4.6, 4.7; wire-reference 9):
//
//   waiting ──instance free──► granted ──WebSocket──► connected ──socket closes──► (ask the container)
//      │                          │                     ▲   ready again: never said hello → instance freed at once
//      │                          │                     │   busy: a drop → detached, resume window
//      │                          │                     │   over or gone → instance retired (a fresh one replaces it)
//      │                          │                     └──── reconnect within the window ◄── detached
//      └─ DELETE, not polled, waited too long      └─ no WebSocket within grantSeconds: instance to the next
//
// A session started under another broker (a take-over of placement) is carried on: waiting → detached.
// Every state may end (→ ended). Each change is a method named for it; one the state does not allow is
// refused (an Error: a caller out of step is a bug, not a case to handle). The session keeps its state's
// clock and says which one ran out; what becomes of its instance then is the broker's to decide.
import type { Duplex } from 'node:stream';
import type { ReadyInstance } from '../control/instances/service.ts';
import type { SessionSubject, StreamingSession } from './sessions.ts';
import type { Version } from './versions.ts';

export type SessionState = 'waiting' | 'granted' | 'connected' | 'detached' | 'ended';

/** The clock that ran out: nobody asked about the place in line, nobody took the grant, nobody came back. */
export type Expiry = 'abandoned' | 'untaken' | 'unresumed';

export interface SessionStart {
  id: string;
  /** The caller's account: only it may continue or end the session. */
  ncaId: string;
  /** Whose credential started it, as the owner's session listing names it (never the secret). */
  subject: SessionSubject;
  functionId: string;
  /** The versions it may use, in order of preference. */
  candidates: Version[];
  /** Epoch ms; now unless it joined under another broker. */
  joinedAt?: number;
}

/** A waiting session nobody asked about for this long has left (its tab is gone). */
export const ABANDON_MS = 10_000;
/** The listing's names for the states: the stream's own words, not the broker's. */
const LISTED_STATE = { waiting: 'WAITING', granted: 'GRANTED', connected: 'STREAMING', detached: 'RESUMING' } as const;

export class Session {
  readonly id: string;
  readonly ncaId: string;
  readonly subject: SessionSubject;
  readonly functionId: string;
  readonly candidates: Version[];
  readonly joinedAt: number;
  #state: SessionState = 'waiting';
  #version: Version | undefined;
  #instance: ReadyInstance | undefined;
  #grantedAt: number | undefined;
  /** When its browser first connected. */
  #connectedAt: number | undefined;
  #client: Duplex | undefined;
  /** When its browser dropped (detached), and when the resume window closes. */
  #detachedAt: number | undefined;
  #resumeBy: number | undefined;
  /** The state's clock: abandoning a line nobody polls, an untaken grant, the resume window. */
  #clock: NodeJS.Timeout | undefined;
  readonly #expired: (session: Session, expiry: Expiry) => void;
  /** Polls held until the session leaves the line. */
  readonly #waiters = new Set<() => void>();

  constructor(start: SessionStart, expired: (session: Session, expiry: Expiry) => void) {
    this.id = start.id;
    this.ncaId = start.ncaId;
    this.subject = start.subject;
    this.functionId = start.functionId;
    this.candidates = start.candidates;
    this.joinedAt = start.joinedAt ?? Date.now();
    this.#expired = expired;
  }

  get state(): SessionState {
    return this.#state;
  }

  get ended(): boolean {
    return this.#state === 'ended';
  }

  /** The version whose instance it holds, from its grant on. */
  get version(): Version | undefined {
    return this.#version;
  }

  get instance(): ReadyInstance | undefined {
    return this.#instance;
  }

  get grantedAt(): number | undefined {
    return this.#grantedAt;
  }

  get connectedOnce(): boolean {
    return this.#connectedAt !== undefined;
  }

  /** When its browser first connected (epoch ms). */
  get connectedAt(): number | undefined {
    return this.#connectedAt;
  }

  /** Its browser's socket while one is open. */
  get client(): Duplex | undefined {
    return this.#client;
  }

  /**
   * A poll for its place in line: held until the session leaves the line or `ms` pass. The place is kept
   * while any poll is held, and given up when none comes within ABANDON_MS after the last.
   */
  poll(ms: number): Promise<void> {
    this.#expect(['waiting'], 'be polled');
    this.#stopClock();
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.#waiters.delete(wake);
        if (this.#state === 'waiting' && this.#waiters.size === 0) this.#startClock(ABANDON_MS, 'abandoned');
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#waiters.add(wake);
    });
  }

  /** The head of the line gets `instance`; its WebSocket must come within `takeWithinMs`. */
  grant(version: Version, instance: ReadyInstance, takeWithinMs: number) {
    this.#expect(['waiting'], 'be granted an instance');
    this.#state = 'granted';
    this.#version = version;
    this.#instance = instance;
    this.#grantedAt = Date.now();
    this.#startClock(takeWithinMs, 'untaken');
    this.#wakePolls();
  }

  /** A browser's WebSocket is piped to its instance: the first, one back after a drop, or a new tab's (the old one is closed). */
  connect(client: Duplex) {
    this.#expect(['granted', 'connected', 'detached'], 'connect');
    this.#stopClock();
    if (this.#client && this.#client !== client) this.#client.destroy();
    this.#client = client;
    this.#state = 'connected';
    this.#connectedAt ??= Date.now();
    this.#detachedAt = this.#resumeBy = undefined;
  }

  /** `client` closed: true when it was this live session's own, which it no longer holds. */
  clientClosed(client: Duplex): boolean {
    if (this.#client !== client || this.ended) return false;
    this.#client = undefined;
    return true;
  }

  /** Its browser dropped while the session goes on: the instance waits `windowMs` for it to come back. */
  detach(windowMs: number) {
    this.#expect(['connected'], 'detach');
    if (this.#client) throw new Error(`session ${this.id} has its browser connected; only one without may detach`);
    this.#state = 'detached';
    this.#detachedAt = Date.now();
    this.resumeWithin(windowMs);
  }

  /**
   * A session started under another broker (the previous holder of placement, or this replica before a
   * restart): it holds `instance`, and its browser, cut off with that broker, has `windowMs` to come back.
   */
  carryOn(version: Version, instance: ReadyInstance, started: { grantedAt: number; connectedAt: number }, windowMs: number) {
    this.#expect(['waiting'], 'be carried on');
    this.#state = 'detached';
    this.#version = version;
    this.#instance = instance;
    this.#grantedAt = started.grantedAt;
    this.#connectedAt = started.connectedAt;
    this.#detachedAt = Date.now();
    this.resumeWithin(windowMs);
  }

  /** The resume window closes `windowMs` after the drop, unless it closes sooner already. */
  resumeWithin(windowMs: number) {
    this.#expect(['detached'], 'have a resume window');
    const resumeBy = this.#detachedAt! + windowMs;
    if (this.#resumeBy !== undefined && this.#resumeBy <= resumeBy) return;
    this.#resumeBy = resumeBy;
    this.#startClock(Math.max(0, resumeBy - Date.now()), 'unresumed');
  }

  /** Over, wherever it stood; its polls are answered. A connected browser keeps its socket (the retired container says bye on it). */
  end() {
    this.#expect(['waiting', 'granted', 'connected', 'detached'], 'end');
    this.#stopClock();
    this.#state = 'ended';
    this.#wakePolls();
  }

  /** As its function's owner reads it; `position` is its place in line while it waits. */
  listed(position: number): StreamingSession {
    if (this.#state === 'ended') throw new Error(`session ${this.id} is ended; only a live session is listed`);
    const iso = (ms: number) => new Date(ms).toISOString();
    return {
      sessionId: this.id, state: LISTED_STATE[this.#state], subject: this.subject, joinedAt: iso(this.joinedAt),
      ...(this.#state === 'waiting' ? { position } : {}),
      ...(this.#instance ? { instanceId: this.#instance.instanceId, versionId: this.#version!.versionId } : {}),
      ...(this.#grantedAt === undefined ? {} : { grantedAt: iso(this.#grantedAt) }),
      ...(this.#connectedAt === undefined ? {} : { connectedAt: iso(this.#connectedAt) }),
      ...(this.#resumeBy === undefined ? {} : { resumeBy: iso(this.#resumeBy) }),
    };
  }

  #startClock(ms: number, expiry: Expiry) {
    this.#stopClock();
    this.#clock = setTimeout(() => this.#expired(this, expiry), ms);
  }

  #stopClock() {
    clearTimeout(this.#clock);
  }

  #wakePolls() {
    for (const wake of [...this.#waiters]) wake();
  }

  #expect(allowed: SessionState[], to: string) {
    if (!allowed.includes(this.#state)) throw new Error(`session ${this.id} is ${this.#state}; only a ${allowed.join(' or ')} session may ${to}`);
  }
}
