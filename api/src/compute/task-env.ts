// A task's own directory and environment, the same for every runtime (mirrors instance-env.ts).
//
// Work dir <stateDir>/tasks/t-<taskId>/:
//   secrets.json      every secret as one JSON object {name: value}, mode 0600 (SVC_SECRETS_FILE);
//                     rewritten when the task's secrets are updated while it runs
//   results/          SVC_RESULTS_DIR: with resultHandlingStrategy UPLOAD, every regular file under it is
//                     uploaded when the task ends; its path below results/ is the result's name
//   output/progress   SVC_PROGRESS_FILE_PATH (in SVC_PROGRESS_DIR): the task writes
//                     {"progress": 0-100} (or the reference's {"percentComplete": …}); each change is a
//                     heartbeat and sets percentComplete
//   output.log        what the process runtime captured of stdout/stderr
//
// Environment, later entries winning:
//   1. containerEnvironment;
//   2. each secret whose name is a valid environment variable name (strings as is, objects as JSON);
//      (neither of them with a reserved name: instance-env.ts)
//   3. SVC_TASK_ID, SVC_TASK_NAME, SVC_NCA_ID, SVC_INSTANCE_ID, SVC_SECRETS_FILE, SVC_RESULTS_DIR,
//      SVC_PROGRESS_DIR, SVC_PROGRESS_FILE_PATH, and the reference's names renamed (SVCT_TASK_ID,
//      SVCT_TASK_NAME, SVCT_NCA_ID, SVCT_RESULTS_DIR, SVCT_PROGRESS_FILE_PATH) so ported containers need
//      only the prefix changed.
// A task gets no ports: it serves nothing and has no health check. Secret values go to the file and the
// environment only; nothing here logs them.
import { chmod, mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { tenantEnvironment } from './instance-env.ts';
import type { InstanceSpec, TaskSpec } from './protocol.ts';

export interface TaskPaths {
  workDir: string;
  secretsFile: string;
  resultsDir: string;
  progressDir: string;
  progressFile: string;
}

/** A directory name for a task id (ids come from the control plane; never trust them as paths). */
export function taskDirName(taskId: string): string {
  return `t-${taskId.replace(/[^A-Za-z0-9_.-]/g, '_')}`;
}

export function taskPaths(workDir: string): TaskPaths {
  const progressDir = path.join(workDir, 'output');
  return {
    workDir, secretsFile: path.join(workDir, 'secrets.json'), resultsDir: path.join(workDir, 'results'),
    progressDir, progressFile: path.join(progressDir, 'progress'),
  };
}

/** Creates the task's directories and secrets file; returns its environment. */
export async function prepareTask(spec: TaskSpec, workDir: string): Promise<Record<string, string>> {
  const paths = taskPaths(workDir);
  await mkdir(workDir, { recursive: true, mode: 0o700 });
  // The task may run as another user (docker): its own directories are writable by anyone, inside a
  // work dir that only the agent's user (and the runtime) can enter.
  for (const dir of [paths.resultsDir, paths.progressDir]) {
    await mkdir(dir, { recursive: true });
    await chmod(dir, 0o777);
  }
  await writeSecretsFile(spec, workDir);
  return taskEnvironment(spec, paths);
}

export async function writeSecretsFile(spec: TaskSpec, workDir: string): Promise<void> {
  const file = taskPaths(workDir).secretsFile;
  const secrets = Object.fromEntries(spec.secrets.map((secret) => [secret.name, secret.value]));
  // Written aside and renamed over, so a task reading it never sees half a file.
  const temporary = `${file}.${process.pid}.tmp`;
  await writeFile(temporary, JSON.stringify(secrets), { mode: 0o600 });
  await chmod(temporary, 0o600);
  await rename(temporary, file);
}

export function taskEnvironment(spec: TaskSpec, paths: TaskPaths): Record<string, string> {
  return Object.assign(tenantEnvironment(spec), {
    SVC_TASK_ID: spec.taskId, SVC_TASK_NAME: spec.name, SVC_NCA_ID: spec.ncaId, SVC_INSTANCE_ID: spec.instanceId,
    SVC_SECRETS_FILE: paths.secretsFile, SVC_RESULTS_DIR: paths.resultsDir,
    SVC_PROGRESS_DIR: paths.progressDir, SVC_PROGRESS_FILE_PATH: paths.progressFile,
    SVCT_TASK_ID: spec.taskId, SVCT_TASK_NAME: spec.name, SVCT_NCA_ID: spec.ncaId,
    SVCT_RESULTS_DIR: paths.resultsDir, SVCT_PROGRESS_FILE_PATH: paths.progressFile,
  });
}

/** The task as the Runtime sees it: an instance that serves nothing (workload 'task'). */
export function taskInstanceSpec(spec: TaskSpec): InstanceSpec {
  return {
    instanceId: spec.instanceId, ncaId: spec.ncaId, functionId: spec.taskId, functionVersionId: spec.taskId,
    functionName: spec.name, functionType: 'DEFAULT', gpu: spec.gpu, instanceType: spec.instanceType, backend: spec.backend,
    containerImage: spec.containerImage, containerArgs: spec.containerArgs, containerEnvironment: spec.containerEnvironment,
    secrets: spec.secrets, inferenceUrl: '/', inferencePort: 0,
    // Never probed: a task has no health check (workload 'task').
    health: { protocol: 'HTTP', uri: '/', port: 0, timeout: 'PT1S', expectedStatusCode: 200 },
    startupGracePeriodMs: 0, workload: 'task',
    ...(spec.registryAuth ? { registryAuth: spec.registryAuth } : {}),
    ...(spec.resources ? { resources: spec.resources } : {}),
  };
}
