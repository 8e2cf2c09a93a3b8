// The filesystem and namespaces a sandboxed instance runs in, as bubblewrap arguments. bwrap runs as the
// instance's own unprivileged user and makes a user namespace from it (so no capability in the host's),
// with its own pid, IPC and UTS namespaces, no further user namespaces, and no_new_privs (bwrap always
// sets it). What it sees:
//   - the system read-only (/usr and its links, /etc, /opt), and the read-only paths the agent was given
//     (the catalog's programs, staged by the launcher: their parents may be private), with the platform's
//     own paths among them hidden under empty tmpfs;
//   - its own /proc (only its processes), a minimal /dev, and private tmpfs at /tmp, /var/tmp and /run;
//   - its work dir read-only (its secrets file; the agent keeps its output log there) and, on top, the
//     directories it writes (request directories; a task's results and progress) read-write. bwrap reads
//     them from the launcher's staging mounts (sandbox.ts), since it runs as the instance's user, which has
//     no way through the agent's 0700 directories.
import { lstatSync, readlinkSync, statSync } from 'node:fs';

const SYSTEM_READ_ONLY = ['/usr', '/etc', '/opt'];
const USR_LINKS = ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];

/** A host directory bwrap mounts from where the launcher staged it (sandbox.ts), at its own path. */
export interface Staged {
  staged: string;
  at: string;
}

export interface SandboxView {
  readOnly: Staged[];
  /** Platform paths inside `readOnly` that the instance must not see (data dir, state dir, keys). */
  hidden: string[];
  workDir: Staged;
  writable: Staged[];
  cwd: string;
  hostname: string;
}

export function bwrapArguments(view: SandboxView): string[] {
  const args = [
    '--unshare-user', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try', '--disable-userns',
    '--new-session', '--hostname', view.hostname,
  ];
  for (const dir of SYSTEM_READ_ONLY) args.push('--ro-bind-try', dir, dir);
  // On a merged-/usr system these are links into /usr; elsewhere they are directories of their own.
  for (const link of USR_LINKS) {
    const kind = kindOf(link);
    if (kind === 'link') args.push('--symlink', readlinkSync(link), link);
    else if (kind === 'dir') args.push('--ro-bind', link, link);
  }
  // Its own /tmp, /var/tmp and /run before the host's paths, which may lie below them (a checkout in /tmp).
  args.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--tmpfs', '/var/tmp', '--tmpfs', '/run');
  for (const dir of view.readOnly) args.push('--ro-bind', dir.staged, dir.at);
  // A hidden path inside another is hidden with it.
  const hiddenPaths = view.hidden.filter((candidate) => !view.hidden.some((other) => other !== candidate && isWithin(candidate, [other])));
  for (const hidden of hiddenPaths) {
    const kind = kindOf(hidden);
    if (kind === 'dir') args.push('--tmpfs', hidden);
    else if (kind === 'file') args.push('--ro-bind', '/dev/null', hidden);
  }
  args.push('--ro-bind', view.workDir.staged, view.workDir.at);
  for (const dir of view.writable) args.push('--bind', dir.staged, dir.at);
  args.push('--chdir', view.cwd);
  return args;
}

function kindOf(target: string): 'link' | 'dir' | 'file' | undefined {
  try {
    const info = lstatSync(target);
    if (info.isSymbolicLink()) return statSync(target, { throwIfNoEntry: false }) ? 'link' : undefined;
    return info.isDirectory() ? 'dir' : 'file';
  } catch {
    return undefined;
  }
}

/** Whether `target` is one of `roots` or inside one (the instance can see it). */
export function isWithin(target: string, roots: string[]): boolean {
  return roots.some((root) => target === root || target.startsWith(root.endsWith('/') ? root : `${root}/`));
}
