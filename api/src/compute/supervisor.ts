// One desired instance, from start to stop. The life of an instance, as reported:
//
//   STARTING ──healthy──► RUNNING ──checks fail──► UNHEALTHY ─┐
//      │  ▲                  │                               ├─► RESTARTING ──back-off──► STARTING
//      │  └──────────────────┼── crash (non-zero exit) ──────┤
//      ├── never healthy within the grace period ────────────┘
//      ├── cannot start at all (UnstartableError, or START_ATTEMPTS failed starts in a row) ──► FAILED
//      │                                                              (terminal, not retried)
//      └── exits 0 on its own (also from RUNNING) ──► EXITED    (terminal: a streaming container after
//                                                                its session; the control plane replaces it)
//   any state ── no longer desired ──► STOPPED (SIGTERM, kill after the grace period)
//
// A RUNNING STREAMING instance is UNHEALTHY only when its control port stops accepting connections: its
// ready check answers 500 during a session by design (health.ts).
// Back-off doubles from initialMs to maxMs per failure in a row, and starts over once an instance has
// stayed RUNNING for resetAfterMs. `restarts` counts every restart of this instance id. A start that keeps
// failing (an engine that is down, a pool of UDP ports others hold) is an answer, not a reason to retry for
// ever: after START_ATTEMPTS in a row (about a minute with the default back-off, enough for an engine
// restarting) the last failure is final.
import { withoutSecrets, type Logger } from '../logger.ts';
import { backoffDelay, type BackoffSettings } from './backoff.ts';
import {
  describeProbe, healthTarget, livenessTarget, pause, waitUntilHealthy, watchUntilUnhealthy, type ProbeSettings, type StartupProbe,
} from './health.ts';
import { prepareInstance } from './instance-env.ts';
import type { InstanceReport, InstanceSpec } from './protocol.ts';
import { describeExit, UnstartableError, type ExitStatus, type Runtime, type RuntimeInstance } from './runtime.ts';

export const START_ATTEMPTS = 7;

export interface SupervisorSettings {
  backoff: BackoffSettings & { resetAfterMs: number };
  probe: ProbeSettings;
  /** SIGTERM-to-kill grace when stopping an instance. */
  stopGraceMs: number;
}

export interface SupervisorOptions {
  spec: InstanceSpec;
  runtime: Runtime;
  workDir: string;
  settings: SupervisorSettings;
  log: Logger;
  onReport(report: InstanceReport): void;
}

type Outcome =
  | { kind: 'healthy' }
  | { kind: 'stopping' }
  | { kind: 'exited'; status: ExitStatus }
  | { kind: 'never-healthy'; detail: string }
  | { kind: 'unhealthy'; detail: string };
/** What ends one run of an instance. */
type Ended = Exclude<Outcome, { kind: 'healthy' }>;

const TERMINAL = new Set(['FAILED', 'EXITED', 'STOPPED']);
/** How long a failed liveness check waits for an exit already under way before it counts. */
const EXITING_GRACE_MS = 3000;
const FAILING = new Set(['UNHEALTHY', 'RESTARTING', 'FAILED']);
/** Lines of an instance's output a failure puts in the log (its report carries up to 50). */
const LOGGED_LINES = 20;
/** A failure's reason ends with the instance's last lines, at most this many and this long. */
const REASON_LINES = 3;
const REASON_OUTPUT_CHARS = 400;
/** While starting, a failed health check is reported at once when it says something new, else this often. */
const STARTUP_REPORT_MS = 5000;

/** A failure in words, with the last lines the instance wrote: "exited with code 3; last output: fatal: …". */
export function withLastOutput(reason: string, logTail: string[] | undefined): string {
  const lines = (logTail ?? []).map((line) => line.trim()).filter(Boolean).slice(-REASON_LINES);
  if (!lines.length) return reason;
  const output = lines.join(' | ');
  return `${reason}; last output: ${output.length > REASON_OUTPUT_CHARS ? `…${output.slice(-REASON_OUTPUT_CHARS)}` : output}`;
}

const seconds = (ms: number) => `${Math.round(ms / 1000)} s`;

export class InstanceSupervisor {
  readonly spec: InstanceSpec;
  readonly #options: SupervisorOptions;
  readonly #stopping = new AbortController();
  readonly #done: Promise<void>;
  #report: InstanceReport;
  #runningSince: number | undefined;
  /** Why the last run ended, said again while the next one starts. */
  #lastFailure: string | undefined;
  #startupReported: { detail: string; at: number } | undefined;

  constructor(options: SupervisorOptions) {
    this.spec = options.spec;
    this.#options = options;
    this.#report = {
      instanceId: options.spec.instanceId, functionVersionId: options.spec.functionVersionId,
      state: 'STARTING', restarts: 0, updatedAt: new Date().toISOString(),
    };
    this.#done = this.#run().catch((error: unknown) => {
      // Only a bug gets here; never leave the instance looking alive.
      options.log.error({ err: error }, 'instance supervisor failed');
      this.#set({ state: 'FAILED', message: `agent error: ${(error as Error).message}` });
    });
  }

  get report(): InstanceReport {
    return this.#report;
  }

  get ended(): boolean {
    return TERMINAL.has(this.#report.state);
  }

  /** Stops the instance (if it still runs) and resolves once it has ended. */
  async stop(): Promise<void> {
    this.#stopping.abort();
    await this.#done;
  }

  async #run(): Promise<void> {
    const { spec, runtime, workDir, settings, log } = this.#options;
    const signal = this.#stopping.signal;
    let failuresInRow = 0;
    let failedStarts = 0;
    let instance: RuntimeInstance | undefined;
    this.#emit();

    while (!signal.aborted) {
      if (this.#report.state !== 'STARTING') this.#set({ state: 'STARTING', ...(this.#lastFailure ? { message: `restarting after: ${this.#lastFailure}` } : {}) });
      try {
        const prepared = await prepareInstance(spec, workDir);
        instance = await runtime.start(spec, { workDir, env: prepared.env, log });
        failedStarts = 0;
      } catch (error) {
        if (signal.aborted) break;
        const message = (error as Error).message;
        if (error instanceof UnstartableError) {
          this.#set({ state: 'FAILED', message });
          return;
        }
        if (++failedStarts >= START_ATTEMPTS) {
          this.#set({ state: 'FAILED', message: `${message} (${START_ATTEMPTS} starts in a row failed; not retried)` });
          return;
        }
        this.#set({ state: 'RESTARTING', restarts: this.#report.restarts + 1, message: `start failed: ${message}` });
        if (!await pause(backoffDelay(settings.backoff, failuresInRow++), signal)) break;
        continue;
      }

      const outcome = await this.#supervise(instance, signal);
      if (outcome.kind === 'stopping') break;
      let reason: string;
      let exitCode: number | null | undefined;
      if (outcome.kind === 'exited') {
        exitCode = outcome.status.code;
        if (exitCode === 0) {
          this.#set({ state: 'EXITED', exitCode, message: this.#withLastOutput('exited on its own with code 0', instance.logTail()) });
          return;
        }
        reason = describeExit(outcome.status);
      } else {
        if (outcome.kind === 'unhealthy') this.#set({ state: 'UNHEALTHY', message: outcome.detail, logTail: instance.logTail() });
        reason = outcome.kind === 'unhealthy'
          ? `unhealthy: ${outcome.detail}`
          : `not healthy within its ${seconds(spec.startupGracePeriodMs)} start-up grace (last check: ${outcome.detail})`;
        await instance.stop(settings.stopGraceMs);
      }
      const logTail = instance.logTail();
      reason = this.#withLastOutput(reason, logTail);
      this.#lastFailure = reason;
      instance = undefined;
      if (this.#runningSince !== undefined && Date.now() - this.#runningSince >= settings.backoff.resetAfterMs) failuresInRow = 0;
      this.#runningSince = undefined;
      this.#set({ state: 'RESTARTING', restarts: this.#report.restarts + 1, exitCode, message: reason, logTail });
      if (!await pause(backoffDelay(settings.backoff, failuresInRow++), signal)) break;
    }

    if (instance) await instance.stop(settings.stopGraceMs);
    this.#set({ state: 'STOPPED', message: 'no longer desired' });
  }

  /** Waits for the first healthy check, then watches; returns what ended this run of the instance. */
  async #supervise(instance: RuntimeInstance, stopping: AbortSignal): Promise<Ended> {
    const { spec, settings } = this.#options;
    const watch = new AbortController();
    const onStop = () => watch.abort();
    stopping.addEventListener('abort', onStop, { once: true });
    if (stopping.aborted) watch.abort();
    const exited = instance.exited.then((status): Ended => ({ kind: 'exited', status }));
    try {
      const startup = await Promise.race([
        exited,
        this.#waitUntilHealthy(instance, watch.signal),
      ]);
      if (startup.kind !== 'healthy') return startup;
      this.#runningSince = Date.now();
      this.#set({ state: 'RUNNING', endpoint: instance.endpoint });
      return await Promise.race([
        exited,
        watchUntilUnhealthy(livenessTarget(spec, instance.endpoint), settings.probe, watch.signal).then(async (detail): Promise<Ended> => {
          if (detail === undefined) return { kind: 'stopping' };
          // A program on its way out (a streaming container after its session) closes its ports before
          // it exits, and an engine reports the exit a moment later: let that exit win the race.
          if (!await pause(EXITING_GRACE_MS, watch.signal)) return { kind: 'stopping' };
          return { kind: 'unhealthy', detail };
        }),
      ]);
    } finally {
      watch.abort();
      stopping.removeEventListener('abort', onStop);
    }
  }

  /** The reason with the last lines (already redacted by the agent's kept logs; again here, for a runtime used bare). */
  #withLastOutput(reason: string, logTail: string[]): string {
    return withLastOutput(reason, withoutSecrets(logTail, this.spec.secrets));
  }

  /** The start-up checks; each failure said in the STARTING report (at once when it is news, else every few seconds). */
  async #waitUntilHealthy(instance: RuntimeInstance, signal: AbortSignal): Promise<Outcome> {
    const { spec, settings } = this.#options;
    const target = healthTarget(spec.health, instance.endpoint);
    this.#startupReported = undefined;
    const result = await waitUntilHealthy(target, spec.startupGracePeriodMs, settings.probe, signal, (probe) => this.#startupProbeFailed(probe));
    if (result.outcome === 'healthy') return { kind: 'healthy' };
    return result.outcome === 'timeout' ? { kind: 'never-healthy', detail: describeProbe(target, result.detail) } : { kind: 'stopping' };
  }

  #startupProbeFailed(probe: StartupProbe): void {
    if (this.#report.state !== 'STARTING') return;
    const now = Date.now();
    const last = this.#startupReported;
    if (last && last.detail === probe.detail && now - last.at < STARTUP_REPORT_MS) return;
    this.#startupReported = { detail: probe.detail, at: now };
    const { startupGracePeriodMs } = this.spec;
    const health = `${probe.detail}, ${probe.tries} ${probe.tries === 1 ? 'try' : 'tries'}, ${seconds(probe.elapsedMs)} of a ${seconds(startupGracePeriodMs)} grace`;
    const message = this.#lastFailure ? `${health}; restarting after: ${this.#lastFailure}` : health;
    // Not a state change: reported, not logged.
    this.#report = { ...this.#report, message, updatedAt: new Date().toISOString() };
    this.#options.onReport(this.#report);
  }

  /** A state change: failure details are kept only on failure states; the endpoint only while RUNNING. */
  #set(change: Partial<InstanceReport> & Pick<InstanceReport, 'state'>): void {
    const { instanceId, functionVersionId, restarts } = this.#report;
    this.#report = { instanceId, functionVersionId, restarts, ...change, updatedAt: new Date().toISOString() };
    if (this.#report.state !== 'RUNNING') delete this.#report.endpoint;
    this.#emit();
  }

  /** Every state change is logged; a failure with the instance's last lines of output (secrets redacted). */
  #emit(): void {
    const { state, restarts, message, exitCode, logTail } = this.#report;
    const lastOutput = logTail?.length ? { lastOutput: withoutSecrets(logTail.slice(-LOGGED_LINES), this.spec.secrets) } : {};
    const level = FAILING.has(state) ? 'warn' : 'info';
    this.#options.log[level]({ state, restarts, exitCode, reason: message, ...lastOutput }, `instance ${state}`);
    this.#options.onReport(this.#report);
  }
}
