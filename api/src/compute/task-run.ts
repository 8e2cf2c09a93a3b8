// One task on the agent, from start to its end. A task runs once; it is never restarted. As reported:
//
//   STARTING ──runtime started it──► RUNNING ──exit 0──────────────────────► COMPLETED
//      │                                │ ──non-zero exit or killed─────────► ERRORED
//      │                                └─ ran past maxRuntimeMs: SIGTERM, ─► EXCEEDED_MAX_RUNTIME_DURATION
//      │                                   kill after the grace period
//      └── cannot start (unknown image, bad args, start failed 3 times) ──► ERRORED
//   any state ── no longer desired (canceled, deleted) ──► STOPPED (SIGTERM, kill after the grace period)
//
// With UPLOAD the result files are uploaded after the exit and before the final report, so a task the
// control plane sees COMPLETED has its results listed. An upload the control plane cannot take right now
// is retried (back-off up to 5 s) for as long as the task stays desired; a refused one (4xx) makes the
// task ERRORED. Failure reports carry the last lines the task wrote.
import { pause } from './health.ts';
import type { Logger } from '../logger.ts';
import { backoffDelay } from './backoff.ts';
import type { TaskReport, TaskRunState, TaskSpec } from './protocol.ts';
import { describeExit, UnstartableError, type ExitStatus, type Runtime, type RuntimeInstance } from './runtime.ts';
import { prepareTask, taskInstanceSpec, taskPaths, writeSecretsFile } from './task-env.ts';
import { readTaskProgress } from './task-progress.ts';
import { listResultFiles, MAX_RESULT_FILES, UploadRefused, type ResultUploader } from './task-results.ts';

export interface TaskRunOptions {
  spec: TaskSpec;
  runtime: Runtime;
  workDir: string;
  log: Logger;
  /** Needed for UPLOAD; without it an UPLOAD task that wrote results ends ERRORED. */
  uploader?: ResultUploader;
  onReport(report: TaskReport): void;
  /** Start attempts before a start failure (other than UnstartableError) is final; default 3. */
  startAttempts?: number;
  /** Back-off between start attempts and upload retries. */
  retry?: { initialMs: number; maxMs: number };
}

const TERMINAL = new Set<TaskRunState>(['COMPLETED', 'ERRORED', 'EXCEEDED_MAX_RUNTIME_DURATION', 'STOPPED']);

export class TaskRun {
  spec: TaskSpec;
  readonly #options: TaskRunOptions;
  readonly #stopping = new AbortController();
  readonly #done: Promise<void>;
  #report: TaskReport;
  #stopGraceMs: number;
  #instance: RuntimeInstance | undefined;

  constructor(options: TaskRunOptions) {
    this.spec = options.spec;
    this.#options = options;
    this.#stopGraceMs = options.spec.terminationGracePeriodMs;
    this.#report = { taskId: options.spec.taskId, instanceId: options.spec.instanceId, state: 'STARTING', updatedAt: new Date().toISOString() };
    this.#done = this.#run().catch((error: unknown) => {
      // Only a bug gets here; never leave the task looking alive.
      options.log.error({ err: error }, 'task run failed');
      this.#set({ state: 'ERRORED', message: `agent error: ${(error as Error).message}` });
    });
  }

  get report(): TaskReport {
    return this.#report;
  }

  get ended(): boolean {
    return TERMINAL.has(this.#report.state);
  }

  get running(): boolean {
    return this.#report.state === 'RUNNING';
  }

  get progressFile(): string {
    return taskPaths(this.#options.workDir).progressFile;
  }

  /** No longer desired: SIGTERM, kill after `graceMs` (default the task's grace period). Resolves once ended. */
  async stop(graceMs?: number): Promise<void> {
    if (graceMs !== undefined) this.#stopGraceMs = Math.min(this.#stopGraceMs, graceMs);
    this.#stopping.abort();
    await this.#done;
  }

  /** The same task with a newer spec (secrets updated): refreshes the secrets file of a task still starting or running. */
  async update(spec: TaskSpec): Promise<void> {
    if (spec.revision <= this.spec.revision) return;
    this.spec = spec;
    if (this.ended) return;
    await writeSecretsFile(spec, this.#options.workDir).catch((error: unknown) =>
      this.#options.log.warn({ err: error }, 'secrets file not refreshed'));
    this.#options.log.info({ revision: spec.revision }, 'task secrets refreshed');
  }

  /** A change of the progress file, seen by the runner's poller. */
  progress(percent: number, at: Date): void {
    if (this.#report.state !== 'RUNNING') return;
    this.#set({ state: 'RUNNING', percentComplete: percent, lastHeartbeatAt: at.toISOString() });
  }

  async #run(): Promise<void> {
    const { runtime, workDir, log } = this.#options;
    const signal = this.#stopping.signal;
    const retry = this.#options.retry ?? { initialMs: 1000, maxMs: 5000 };
    this.#emit();

    const attempts = this.#options.startAttempts ?? 3;
    for (let attempt = 1; !this.#instance; attempt++) {
      if (signal.aborted) return this.#set({ state: 'STOPPED', message: 'no longer desired' });
      try {
        const env = await prepareTask(this.spec, workDir);
        this.#instance = await runtime.start(taskInstanceSpec(this.spec), { workDir, env, log });
      } catch (error) {
        const message = (error as Error).message;
        if (error instanceof UnstartableError || attempt >= attempts) {
          return this.#set({ state: 'ERRORED', message: `cannot start: ${message}` });
        }
        log.warn({ attempt, reason: message }, 'task start failed; retrying');
        if (!await pause(backoffDelay(retry, attempt - 1), signal)) return this.#set({ state: 'STOPPED', message: 'no longer desired' });
      }
    }

    const instance = this.#instance;
    this.#set({ state: 'RUNNING' });
    let exceeded = false;
    const { maxRuntimeMs } = this.spec;
    const runtimeTimer = maxRuntimeMs === undefined ? undefined : setTimeout(() => {
      exceeded = true;
      log.info({ maxRuntimeMs, graceMs: this.spec.terminationGracePeriodMs }, 'task ran past maxRuntimeDuration; stopping it');
      void instance.stop(this.spec.terminationGracePeriodMs);
    }, maxRuntimeMs);
    const stopRequested = new Promise<'stop'>((resolve) => {
      if (signal.aborted) resolve('stop');
      signal.addEventListener('abort', () => resolve('stop'), { once: true });
    });
    const outcome = await Promise.race([instance.exited, stopRequested]);
    if (outcome === 'stop') {
      await instance.stop(this.#stopGraceMs);
      clearTimeout(runtimeTimer);
      return this.#set({ state: 'STOPPED', message: 'no longer desired' });
    }
    clearTimeout(runtimeTimer);
    const status = outcome as ExitStatus;
    const logTail = instance.logTail();
    // The poller may not have seen the last write before the exit.
    const last = await readTaskProgress(this.progressFile);
    if (last) this.#report = { ...this.#report, percentComplete: last.percent, lastHeartbeatAt: last.at.toISOString() };
    let final: Partial<TaskReport> & { state: TaskRunState };
    if (exceeded) {
      final = { state: 'EXCEEDED_MAX_RUNTIME_DURATION', exitCode: status.code, logTail, message: `ran longer than maxRuntimeDuration (${maxRuntimeMs} ms); ${describeExit(status)}` };
    } else if (status.code === 0) {
      final = { state: 'COMPLETED', exitCode: 0 };
    } else {
      final = { state: 'ERRORED', exitCode: status.code, logTail, message: describeExit(status) };
    }

    if (this.spec.resultHandlingStrategy === 'UPLOAD') {
      const uploaded = await this.#upload(signal, retry);
      if (uploaded === 'stopped') return this.#set({ state: 'STOPPED', message: 'no longer desired' });
      if (typeof uploaded === 'string') {
        final = final.state === 'COMPLETED' ? { state: 'ERRORED', exitCode: 0, logTail, message: uploaded } : { ...final, message: `${final.message}; ${uploaded}` };
      } else {
        final.results = uploaded;
      }
    }
    this.#set({ ...final, percentComplete: this.#report.percentComplete, lastHeartbeatAt: this.#report.lastHeartbeatAt });
  }

  /** The number of files uploaded, 'stopped', or why the upload failed. */
  async #upload(signal: AbortSignal, retry: { initialMs: number; maxMs: number }): Promise<number | string> {
    const { resultsDir } = taskPaths(this.#options.workDir);
    const files = await listResultFiles(resultsDir);
    if (files.length > MAX_RESULT_FILES) return `more than ${MAX_RESULT_FILES} result files; none kept`;
    if (files.length === 0) return 0;
    const uploader = this.#options.uploader;
    if (!uploader) return 'results cannot be uploaded: this agent has no link to a control plane';
    for (const file of files) {
      for (let attempt = 0; ; attempt++) {
        if (signal.aborted) return 'stopped';
        try {
          await uploader.upload(this.spec.taskId, file);
          break;
        } catch (error) {
          if (error instanceof UploadRefused) return `results upload failed: ${error.message}`;
          this.#options.log.warn({ result: file.name, reason: (error as Error).message, attempt }, 'result upload failed; retrying');
          if (!await pause(backoffDelay(retry, attempt), signal)) return 'stopped';
        }
      }
    }
    this.#options.log.info({ results: files.length }, 'task results uploaded');
    return files.length;
  }

  /** A state change; failure details are kept only while they apply. */
  #set(change: Partial<TaskReport> & Pick<TaskReport, 'state'>): void {
    const { taskId, instanceId, percentComplete, lastHeartbeatAt } = this.#report;
    this.#report = { taskId, instanceId, percentComplete, lastHeartbeatAt, ...change, updatedAt: new Date().toISOString() };
    for (const key of Object.keys(this.#report) as (keyof TaskReport)[]) if (this.#report[key] === undefined) delete this.#report[key];
    this.#emit();
  }

  #emit(): void {
    const { state, exitCode, message, percentComplete } = this.#report;
    if (state !== 'RUNNING' || percentComplete === undefined) this.#options.log.info({ state, exitCode, reason: message }, `task ${state}`);
    this.#options.onReport(this.#report);
  }
}

