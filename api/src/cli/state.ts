// The CLI's saved state (~/.config/svc/state.json, mode 0600): where the gateway is and the credentials
// `svc init` and `svc api-key generate` obtained. Environment variables win over the file.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';

const cliStateSchema = z.object({
  /** Base URL of the gateway, e.g. http://localhost:8080. */
  server: z.string(),
  /** Domain the gateway routes by (api.<address>, api-keys.<address>). */
  gatewayAddress: z.string(),
  token: z.string().optional(),
  tokenExpiresAt: z.string().optional(),
  apiKey: z.string().optional(),
  taskApiKey: z.string().optional(),
});

export type CliState = z.infer<typeof cliStateSchema>;

const savedSchema = cliStateSchema.partial();

/** What the file holds; one that does not decode is an error saying which file, in one line. */
function readSaved(file: string): Partial<CliState> {
  if (!existsSync(file)) return {};
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new Error(`${file} is not JSON (${(error as Error).message}); fix or delete it`);
  }
  const saved = savedSchema.safeParse(value);
  if (!saved.success) throw new Error(`${file} is not a saved svc state (${z.prettifyError(saved.error).replaceAll('\n', ' ')}); fix or delete it`);
  return saved.data;
}

export function stateFile(env: NodeJS.ProcessEnv): string {
  if (env.SVC_STATE_FILE) return env.SVC_STATE_FILE;
  const configHome = env.XDG_CONFIG_HOME || path.join(os.homedir(), '.config');
  return path.join(configHome, 'svc', 'state.json');
}

export function loadState(env: NodeJS.ProcessEnv): CliState {
  const file = stateFile(env);
  const saved = readSaved(file);
  return {
    ...saved,
    server: env.SVC_SERVER ?? saved.server ?? `http://localhost:${env.SVC_PORT ?? 8080}`,
    gatewayAddress: env.SVC_GATEWAY_ADDRESS ?? saved.gatewayAddress ?? 'localhost',
    token: env.SVC_TOKEN ?? saved.token,
    apiKey: env.SVC_API_KEY ?? saved.apiKey,
    taskApiKey: env.SVC_TASK_API_KEY ?? saved.taskApiKey,
  };
}

/** Merges `changes` into the saved file; environment overrides are never written. */
export function saveState(env: NodeJS.ProcessEnv, changes: Partial<CliState>): void {
  const file = stateFile(env);
  const saved = readSaved(file);
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  writeFileSync(file, JSON.stringify({ ...saved, ...changes }, null, 2) + '\n', { mode: 0o600 });
  chmodSync(file, 0o600);
}
