// What a `svc` command is: its help, its options, and what it runs with the parsed command line.
import type { ParseArgsOptionsConfig } from 'node:util';
import type { CliState } from './state.ts';

export interface CommandContext {
  /** As parseArgs gives them: a `multiple` option is an array. */
  values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  positionals: string[];
  env: NodeJS.ProcessEnv;
  state: CliState;
  /** Prints `data` as JSON with --json, else the human rendering. */
  print(human: string, data: unknown): void;
}

export interface Command {
  summary: string;
  usage?: string;
  options?: ParseArgsOptionsConfig;
  /** Runs until stopped (serve, agent, autoscaler): starts under the heap cap and the watchdog. */
  role?: true;
  run(context: CommandContext): Promise<void>;
}
