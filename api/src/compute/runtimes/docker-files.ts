// The host files a container gets, each bind-mounted at its host path so that the paths in its environment
// (SVC_SECRETS_FILE, SVC-LARGE-OUTPUT-DIR, a task's SVC_RESULTS_DIR and SVC_PROGRESS_DIR) mean the same
// inside and out: the secrets file read-only, and the directories it writes. Never the whole work dir: the
// agent keeps files of its own there that a container must not replace.
//
// The container's users are mapped to host ids the agent does not know in advance (a range per container),
// so what it must use is opened to everyone: the secrets file 0444, its directories 0777. That reaches no
// one else: the work dir is inside the agent's state dir (0700), and no other container mounts them. The
// modes are set on descriptors opened without following symlinks.
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { outputDirOf, secretsFileOf } from '../instance-env.ts';
import type { InstanceSpec } from '../protocol.ts';
import { taskPaths } from '../task-env.ts';

export async function containerBinds(spec: InstanceSpec, workDir: string): Promise<string[]> {
  const secretsFile = secretsFileOf(workDir);
  const writable = spec.workload === 'task'
    ? [taskPaths(workDir).resultsDir, taskPaths(workDir).progressDir]
    : [outputDirOf(workDir)];
  await openTo(secretsFile, 0o444, constants.O_RDONLY);
  for (const dir of writable) await openTo(dir, 0o777, constants.O_RDONLY | constants.O_DIRECTORY);
  return [`${secretsFile}:${secretsFile}:ro`, ...writable.map((dir) => `${dir}:${dir}:rw`)];
}

async function openTo(file: string, mode: number, flags: number): Promise<void> {
  const handle = await open(file, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const stat = await handle.stat();
    const expected = flags & constants.O_DIRECTORY ? stat.isDirectory() : stat.isFile();
    if (!expected) throw new Error(`${file} is not a ${flags & constants.O_DIRECTORY ? 'directory' : 'regular file'}`);
    await handle.chmod(mode);
  } finally {
    await handle.close();
  }
}
