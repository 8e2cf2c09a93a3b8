// The CLI's saved state (~/.config/svc/state.json, mode 0600): where the gateway is and the credentials
// `svc init` and `svc api-key generate` obtained. Environment variables win over the file.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface CliState {
  /** Base URL of the gateway, e.g. http://localhost:8080. */
  server: string;
  /** Domain the gateway routes by (api.<address>, api-keys.<address>). */
  gatewayAddress: string;
  token?: string;
  tokenExpiresAt?: string;
  apiKey?: string;
  taskApiKey?: string;
}

export function stateFile(env: NodeJS.ProcessEnv): string {
  if (env.SVC_STATE_FILE) return env.SVC_STATE_FILE;
  const configHome = env.XDG_CONFIG_HOME || path.join(os.homedir(), '.config');
  return path.join(configHome, 'svc', 'state.json');
}

export function loadState(env: NodeJS.ProcessEnv): CliState {
  const file = stateFile(env);
  const saved: Partial<CliState> = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) as Partial<CliState> : {};
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
  const saved = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) as Partial<CliState> : {};
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  writeFileSync(file, JSON.stringify({ ...saved, ...changes }, null, 2) + '\n', { mode: 0o600 });
  chmodSync(file, 0o600);
}
