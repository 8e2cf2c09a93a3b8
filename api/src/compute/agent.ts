// The worker agent: holds the desired set the control plane sent, and reconciles it with what runs.
// Each desired instance id gets one supervisor (supervisor.ts: start, health, restart with back-off, a
// start failing again and again final); ids that leave the desired set are stopped and forgotten. An id
// is never started twice while it runs: a re-sent desired set (after a reconnect) changes nothing for the
// ids it still holds.
//
// The agent runs instances through a Runtime and knows nothing of the link: the link (link.ts), or an
// in-process control plane, calls applyDesired and listens to onReport/onProgress.
//
// State dir layout: <stateDir>/instances/<id>/ (workDir: secrets.json, output.log, requests/<requestId>/),
// plus whatever the runtime keeps (process runtime: <stateDir>/pids/).
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../logger.ts';
import type { BackoffSettings } from './backoff.ts';
import { DEFAULT_PROBE_SETTINGS, type ProbeSettings } from './health.ts';
import { fileNameFor } from './instance-env.ts';
import { watchProgress, type ProgressWatch } from './progress.ts';
import type { Endpoint, InstanceReport, InstanceSpec, ProgressReport } from './protocol.ts';
import type { Runtime } from './runtime.ts';
import { InstanceSupervisor, type SupervisorSettings } from './supervisor.ts';

export interface AgentOptions {
  runtime: Runtime;
  stateDir: string;
  log: Logger;
  /** Restart back-off; defaults 1 s doubling to 30 s, reset after 60 s RUNNING. */
  backoff?: Partial<BackoffSettings & { resetAfterMs: number }>;
  /** Health probing; defaults 250 ms while starting, 5 s once RUNNING, 3 failures in a row. */
  probe?: Partial<ProbeSettings>;
  /** SIGTERM-to-kill grace when stopping an instance; default 10 s. */
  stopGraceMs?: number;
  /** Progress file polling; defaults every 200 ms, request directories removed after 1 h. */
  progress?: { intervalMs?: number; maxAgeMs?: number };
}

export type Listener<T> = (value: T) => void;

export interface Agent {
  readonly runtimeName: string;
  /** The whole desired set: starts ids not yet known, stops ids no longer in it. */
  applyDesired(specs: InstanceSpec[]): void;
  /** The current report of every instance this agent holds (for `hello` after a reconnect). */
  reports(): InstanceReport[];
  /** Where a running instance is reached, and where its requests get their directories (SVC-LARGE-OUTPUT-DIR's parent). */
  endpointOf(instanceId: string): Endpoint | undefined;
  /** Called on every state change of every instance. Returns an unsubscribe function. */
  onReport(listener: Listener<InstanceReport>): () => void;
  onProgress(listener: Listener<ProgressReport>): () => void;
  /** Stops every instance (each reports STOPPED) and ignores later desired sets. */
  stop(): Promise<void>;
}

/** Ends what an earlier run of the agent left behind (runtime.cleanup, old work dirs), then returns the agent. */
export async function startAgent(options: AgentOptions): Promise<Agent> {
  const instancesDir = path.join(options.stateDir, 'instances');
  await options.runtime.cleanup?.();
  await rm(instancesDir, { recursive: true, force: true });
  await mkdir(instancesDir, { recursive: true, mode: 0o700 });
  return new WorkerAgent(options, instancesDir);
}

class WorkerAgent implements Agent {
  readonly runtimeName: string;
  readonly #options: AgentOptions;
  readonly #instancesDir: string;
  readonly #settings: SupervisorSettings;
  readonly #supervisors = new Map<string, InstanceSupervisor>();
  /** Ids being stopped; they keep reporting until STOPPED. */
  readonly #leaving = new Map<string, { supervisor: InstanceSupervisor; done: Promise<void> }>();
  readonly #watches = new Map<string, ProgressWatch>();
  readonly #reportListeners = new Set<Listener<InstanceReport>>();
  readonly #progressListeners = new Set<Listener<ProgressReport>>();
  #desired = new Map<string, InstanceSpec>();
  #stopped = false;

  constructor(options: AgentOptions, instancesDir: string) {
    this.runtimeName = options.runtime.name;
    this.#options = options;
    this.#instancesDir = instancesDir;
    this.#settings = {
      backoff: { initialMs: 1000, maxMs: 30_000, resetAfterMs: 60_000, ...options.backoff },
      probe: { ...DEFAULT_PROBE_SETTINGS, ...options.probe },
      stopGraceMs: options.stopGraceMs ?? 10_000,
    };
  }

  applyDesired(specs: InstanceSpec[]): void {
    if (this.#stopped) return;
    this.#desired = new Map(specs.map((spec) => [spec.instanceId, spec]));
    this.#reconcile();
  }

  reports(): InstanceReport[] {
    // Leaving instances count until they have ended; then they are gone for the control plane too.
    const leaving = [...this.#leaving.values()].map((entry) => entry.supervisor).filter((supervisor) => !supervisor.ended);
    return [...this.#supervisors.values(), ...leaving].map((supervisor) => supervisor.report);
  }

  endpointOf(instanceId: string): Endpoint | undefined {
    const report = this.#supervisors.get(instanceId)?.report;
    return report?.state === 'RUNNING' ? report.endpoint : undefined;
  }

  onReport(listener: Listener<InstanceReport>): () => void {
    this.#reportListeners.add(listener);
    return () => this.#reportListeners.delete(listener);
  }

  onProgress(listener: Listener<ProgressReport>): () => void {
    this.#progressListeners.add(listener);
    return () => this.#progressListeners.delete(listener);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#desired = new Map();
    this.#reconcile();
    await Promise.all([...this.#leaving.values()].map((entry) => entry.done));
  }

  #reconcile(): void {
    for (const [id, supervisor] of this.#supervisors) {
      if (!this.#desired.has(id)) this.#remove(id, supervisor);
    }
    for (const [id, spec] of this.#desired) {
      // An id still stopping is started again, if still desired, once it has stopped (see #remove).
      if (!this.#supervisors.has(id) && !this.#leaving.has(id)) this.#add(spec);
    }
  }

  #add(spec: InstanceSpec): void {
    const log = this.#options.log.child({ instanceId: spec.instanceId, functionId: spec.functionId, functionVersionId: spec.functionVersionId });
    const supervisor = new InstanceSupervisor({
      spec, runtime: this.#options.runtime, workDir: this.#workDirOf(spec.instanceId), settings: this.#settings, log,
      onReport: (report) => this.#onInstanceReport(report),
    });
    this.#supervisors.set(spec.instanceId, supervisor);
  }

  #remove(id: string, supervisor: InstanceSupervisor): void {
    this.#supervisors.delete(id);
    const done = supervisor.stop()
      .then(() => rm(this.#workDirOf(id), { recursive: true, force: true }))
      .catch((error: unknown) => this.#options.log.warn({ err: error, instanceId: id }, 'instance clean-up failed'))
      .finally(() => {
        this.#stopWatch(id);
        this.#leaving.delete(id);
        if (!this.#stopped) this.#reconcile();
      });
    this.#leaving.set(id, { supervisor, done });
  }

  #workDirOf(instanceId: string): string {
    return path.join(this.#instancesDir, fileNameFor(instanceId));
  }

  #onInstanceReport(report: InstanceReport): void {
    if (report.state === 'RUNNING' && report.endpoint?.outputDir) this.#startWatch(report.instanceId, report.endpoint.outputDir);
    else this.#stopWatch(report.instanceId);
    for (const listener of this.#reportListeners) {
      try {
        listener(report);
      } catch (error) {
        this.#options.log.error({ err: error }, 'instance report listener failed');
      }
    }
  }

  #startWatch(instanceId: string, outputDir: string): void {
    if (this.#watches.has(instanceId)) return;
    this.#watches.set(instanceId, watchProgress({
      instanceId, outputDir, log: this.#options.log, ...this.#options.progress,
      emit: (progress) => {
        for (const listener of this.#progressListeners) {
          try {
            listener(progress);
          } catch (error) {
            this.#options.log.error({ err: error }, 'progress listener failed');
          }
        }
      },
    }));
  }

  #stopWatch(instanceId: string): void {
    this.#watches.get(instanceId)?.stop();
    this.#watches.delete(instanceId);
  }
}
