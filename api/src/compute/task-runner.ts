// The agent's task runner: holds the desired set of tasks the control plane sent (protocol.ts `tasks`)
// and runs each id once (task-run.ts), through the same Runtime as instances. Ids that leave the desired
// set are stopped if still running, then forgotten with their work dir. An ended task stays in reports()
// until the control plane drops it from the desired set, so a final report lost with the link is
// repeated in the next hello. A task id is never started twice: re-sent sets change nothing for ids
// already held, and an id that was dropped is not started again by a late spec.
//
// Work dirs: <stateDir>/tasks/t-<taskId>/ (task-env.ts); all removed when the runner starts, since the
// processes of an earlier run of the agent are gone (startAgent's runtime.cleanup() ended them).
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../logger.ts';
import type { TaskReport, TaskSpec } from './protocol.ts';
import type { Runtime } from './runtime.ts';
import { taskDirName } from './task-env.ts';
import { pollTaskProgress } from './task-progress.ts';
import type { ResultUploader } from './task-results.ts';
import type { OutputLogs } from './output-logs.ts';
import { TaskRun } from './task-run.ts';

export interface TaskRunnerOptions {
  runtime: Runtime;
  stateDir: string;
  log: Logger;
  uploader?: ResultUploader;
  /** How often running tasks' progress files are checked; default 500 ms. */
  progressIntervalMs?: number;
  /** Back-off of start retries and result uploads; default 1 s doubling to 5 s. */
  retry?: { initialMs: number; maxMs: number };
  /** The agent's kept output: a task's updated secrets are redacted there too. */
  outputs?: Pick<OutputLogs, 'redactAlso'>;
}

export interface TaskRunner {
  /** The whole desired set by id, with the specs not sent before (see ControlMessage `tasks`). */
  applyDesired(desired: string[], specs: TaskSpec[]): void;
  /** The current report of every task held, running or ended (for `hello` after a reconnect). */
  reports(): TaskReport[];
  onReport(listener: (report: TaskReport) => void): () => void;
  /** Stops every task (grace at most `graceMs`) and ignores later desired sets. */
  stop(graceMs?: number): Promise<void>;
}

export async function startTaskRunner(options: TaskRunnerOptions): Promise<TaskRunner> {
  const tasksDir = path.join(options.stateDir, 'tasks');
  await rm(tasksDir, { recursive: true, force: true });
  await mkdir(tasksDir, { recursive: true, mode: 0o700 });
  return new WorkerTaskRunner(options, tasksDir);
}

class WorkerTaskRunner implements TaskRunner {
  readonly #options: TaskRunnerOptions;
  readonly #tasksDir: string;
  readonly #runs = new Map<string, TaskRun>();
  /** Ids being stopped or forgotten; they report until gone and are not started again meanwhile. */
  readonly #leaving = new Map<string, { run: TaskRun; done: Promise<void> }>();
  readonly #listeners = new Set<(report: TaskReport) => void>();
  readonly #poller: { stop(): void };
  #stopped = false;

  constructor(options: TaskRunnerOptions, tasksDir: string) {
    this.#options = options;
    this.#tasksDir = tasksDir;
    this.#poller = pollTaskProgress(() => this.#runs.entries(), options.progressIntervalMs ?? 500);
  }

  applyDesired(desired: string[], specs: TaskSpec[]): void {
    if (this.#stopped) return;
    const wanted = new Set(desired);
    for (const [id, run] of this.#runs) if (!wanted.has(id)) this.#remove(id, run);
    for (const spec of specs) {
      if (!wanted.has(spec.taskId) || this.#leaving.has(spec.taskId)) continue;
      const known = this.#runs.get(spec.taskId);
      if (known) {
        this.#options.outputs?.redactAlso(spec.instanceId, spec.secrets);
        void known.update(spec);
      }
      else this.#add(spec);
    }
  }

  reports(): TaskReport[] {
    const leaving = [...this.#leaving.values()].map((entry) => entry.run).filter((run) => !run.ended);
    return [...this.#runs.values(), ...leaving].map((run) => run.report);
  }

  onReport(listener: (report: TaskReport) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async stop(graceMs?: number): Promise<void> {
    this.#stopped = true;
    this.#poller.stop();
    for (const [id, run] of this.#runs) this.#remove(id, run, graceMs);
    await Promise.all([...this.#leaving.values()].map((entry) => entry.done));
  }

  #add(spec: TaskSpec): void {
    const log = this.#options.log.child({ taskId: spec.taskId, instanceId: spec.instanceId });
    const run = new TaskRun({
      spec, runtime: this.#options.runtime, workDir: path.join(this.#tasksDir, taskDirName(spec.taskId)), log,
      uploader: this.#options.uploader, retry: this.#options.retry,
      onReport: (report) => this.#emit(report),
    });
    this.#runs.set(spec.taskId, run);
  }

  #remove(id: string, run: TaskRun, graceMs?: number): void {
    this.#runs.delete(id);
    const done = run.stop(graceMs)
      .then(() => rm(path.join(this.#tasksDir, taskDirName(id)), { recursive: true, force: true }))
      .catch((error: unknown) => this.#options.log.warn({ err: error, taskId: id }, 'task clean-up failed'))
      .finally(() => this.#leaving.delete(id));
    this.#leaving.set(id, { run, done });
  }

  #emit(report: TaskReport): void {
    for (const listener of this.#listeners) {
      try {
        listener(report);
      } catch (error) {
        this.#options.log.error({ err: error }, 'task report listener failed');
      }
    }
  }
}
