// How an agent runs an instance. One small interface; implementations in runtimes/: process (the
// embedded default), docker (Docker Engine API), and later kubernetes.
import type { Logger } from '../logger.ts';
import type { Endpoint, InstanceSpec } from './protocol.ts';

export interface RuntimeContext {
  /** A directory of this instance's own on the agent's host (secrets file, output dir, logs). */
  workDir: string;
  /** Environment for the instance: containerEnvironment, secrets and the port contract, already merged. */
  env: Record<string, string>;
  log: Logger;
  /** Each chunk of the instance's stdout and stderr as it comes (the agent's kept logs: output-logs.ts). */
  output?(stream: OutputStream, chunk: Buffer): void;
}

export type OutputStream = 'stdout' | 'stderr';

export interface ExitStatus {
  code: number | null;
  signal: string | null;
  /** Why it ended, when the runtime knows more than the code says (killed for memory). */
  reason?: string;
}

/** An exit in words, for reports and logs. */
export function describeExit(status: ExitStatus): string {
  return status.reason ?? (status.signal ? `killed by ${status.signal}` : `exited with code ${status.code}`);
}

export interface RuntimeInstance {
  endpoint: Endpoint;
  /** Settles when the instance ends, whatever the reason. */
  exited: Promise<ExitStatus>;
  /** SIGTERM (or the runtime's equivalent), then a kill after `graceMs`. Resolves once it has ended. */
  stop(graceMs: number): Promise<void>;
  /** The last lines it wrote to stdout/stderr. */
  logTail(): string[];
}

export interface Runtime {
  readonly name: string;
  start(spec: InstanceSpec, context: RuntimeContext): Promise<RuntimeInstance>;
  /** Ends whatever a previous run of this agent left behind (after a crash of the agent's process). */
  cleanup?(): Promise<void>;
  /** Once every instance has stopped: lets go of what the runtime holds on the host for this agent. */
  close?(): Promise<void>;
}

/**
 * What a runtime throws from start() when the instance can never start as specified (unknown image,
 * bad spec): the agent reports FAILED and does not retry. Any other error is retried with back-off.
 */
export class UnstartableError extends Error {
  override name = 'UnstartableError';
}
