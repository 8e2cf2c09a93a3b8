// An instance's own directory and environment, the same for every runtime.
//
// Environment, later entries winning:
//   1. the function's containerEnvironment;
//   2. each secret whose name is a valid environment variable name (strings as is, objects as JSON);
//   3. SVC_INSTANCE_ID, SVC_FUNCTION_ID, SVC_FUNCTION_VERSION_ID, SVC_NCA_ID, and SVC_SECRETS_FILE, the path
//      of <workDir>/secrets.json (mode 0600): every secret, names with dots or dashes included, as one
//      JSON object {name: value};
//   4. the port contract, added by the runtime because it picks the ports (see runtimes/ports.ts).
// Names a tenant may not set (domain/environment.ts: PATH, LD_*, NODE_OPTIONS…) are refused when a function
// is created; any such name in a spec anyway (stored before the rule) is left out of the environment here.
// Secret values are written to the file and the environment only; nothing here logs them.
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { isReservedEnvironmentName } from '../domain/environment.ts';
import type { InstanceSpec } from './protocol.ts';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface PreparedInstance {
  env: Record<string, string>;
  /** <workDir>/requests: each request gets <requestId>/ here (progress file, large output). */
  outputDir: string;
}

/** A file or directory name for an instance id (ids come from the control plane; never trust them as paths). */
export function fileNameFor(instanceId: string): string {
  return `i-${instanceId.replace(/[^A-Za-z0-9_.-]/g, '_')}`;
}

export function outputDirOf(workDir: string): string {
  return path.join(workDir, 'requests');
}

export function secretsFileOf(workDir: string): string {
  return path.join(workDir, 'secrets.json');
}

/** Creates the work and output directories, writes the secrets file, and returns the environment. */
export async function prepareInstance(spec: InstanceSpec, workDir: string): Promise<PreparedInstance> {
  const outputDir = outputDirOf(workDir);
  await mkdir(outputDir, { recursive: true, mode: 0o700 });
  const secretsFile = secretsFileOf(workDir);
  const secrets = Object.fromEntries(spec.secrets.map((secret) => [secret.name, secret.value]));
  await writeFile(secretsFile, JSON.stringify(secrets), { mode: 0o600 });
  await chmod(secretsFile, 0o600); // writeFile's mode applies only when it creates the file
  return { env: instanceEnvironment(spec, secretsFile), outputDir };
}

/** containerEnvironment, then the secrets with variable-safe names, without the reserved names. */
export function tenantEnvironment(spec: Pick<InstanceSpec, 'containerEnvironment' | 'secrets'>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const { key, value } of spec.containerEnvironment) if (!isReservedEnvironmentName(key)) env[key] = value;
  for (const { name, value } of spec.secrets) {
    if (ENV_NAME.test(name) && !isReservedEnvironmentName(name)) env[name] = typeof value === 'string' ? value : JSON.stringify(value);
  }
  return env;
}

export function instanceEnvironment(spec: InstanceSpec, secretsFile: string): Record<string, string> {
  const env = tenantEnvironment(spec);
  env.SVC_INSTANCE_ID = spec.instanceId;
  env.SVC_FUNCTION_ID = spec.functionId;
  env.SVC_FUNCTION_VERSION_ID = spec.functionVersionId;
  env.SVC_NCA_ID = spec.ncaId;
  env.SVC_SECRETS_FILE = secretsFile;
  return env;
}
