// What of its work dir an instance or task uses, whatever the runtime: its secrets file, read, and the
// directories it writes (a function's request directories; a task's results and progress). Nothing else
// of the work dir is the instance's: the agent keeps files of its own there (output.log).
//
// The instance runs as a user the agent does not know in advance (a sandbox's, a container's mapped
// range), so these are opened to everyone: the secrets file 0444, the directories 0777. That reaches no
// one else, since the work dir is inside the agent's 0700 state dir and only this instance is given them.
// The modes are set on descriptors opened without following links: an instance of an earlier run of this
// work dir could have left one there.
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { outputDirOf, secretsFileOf } from './instance-env.ts';
import type { InstanceSpec } from './protocol.ts';
import { taskPaths } from './task-env.ts';

export interface InstanceFiles {
  secretsFile: string;
  writable: string[];
}

export function instanceFilesOf(spec: InstanceSpec, workDir: string): InstanceFiles {
  const writable = spec.workload === 'task' ? [taskPaths(workDir).resultsDir, taskPaths(workDir).progressDir] : [outputDirOf(workDir)];
  return { secretsFile: secretsFileOf(workDir), writable };
}

/** Opens the instance's files to its user, whoever that is (above). */
export async function openToInstance(files: InstanceFiles): Promise<void> {
  await chmodOpened(files.secretsFile, 0o444);
  for (const dir of files.writable) await chmodOpened(dir, 0o777, constants.O_DIRECTORY);
}

/** chmod on a descriptor of `file` opened without following a link (a directory's with O_DIRECTORY). */
export async function chmodOpened(file: string, mode: number, flags = 0): Promise<void> {
  const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | flags);
  try {
    const stat = await handle.stat();
    if (flags & constants.O_DIRECTORY ? !stat.isDirectory() : !stat.isFile()) throw new Error(`${file} is not what the instance was given`);
    await handle.chmod(mode);
  } finally {
    await handle.close();
  }
}
