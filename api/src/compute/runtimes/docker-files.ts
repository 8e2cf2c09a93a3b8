// The host files a container gets (../instance-files.ts), each bind-mounted at its host path so that the
// paths in its environment (SVC_SECRETS_FILE, SVC-LARGE-OUTPUT-DIR, a task's SVC_RESULTS_DIR and
// SVC_PROGRESS_DIR) mean the same inside and out: the secrets file read-only, and the directories it
// writes. Never the whole work dir: the agent keeps files of its own there that a container must not replace.
import { instanceFilesOf, openToInstance } from '../instance-files.ts';
import type { InstanceSpec } from '../protocol.ts';

export async function containerBinds(spec: InstanceSpec, workDir: string): Promise<string[]> {
  const files = instanceFilesOf(spec, workDir);
  await openToInstance(files);
  return [`${files.secretsFile}:${files.secretsFile}:ro`, ...files.writable.map((dir) => `${dir}:${dir}:rw`)];
}
