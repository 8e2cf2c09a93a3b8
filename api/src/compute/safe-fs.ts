// Files the agent opens inside directories a tenant's code can write: an instance's request directories
// (progress files, staged assets), a task's results and progress. The tenant may plant links, FIFOs or
// devices there, or swap a directory for a link between two calls, so every path is walked one name at a
// time from a directory of the agent's own, each step opened relative to the last open directory (through
// /proc/self/fd/<fd>/<name>, openat's semantics, which Node lacks) and never following a link; files are
// opened without blocking, used only when they are regular, and read only up to a cap. So a read can
// neither leave the tenant's directory nor hold one of libuv's few threads, which the credential checks of
// every API request share.
import { constants, type Stats } from 'node:fs';
import { mkdir, open, readdir, rmdir, unlink, type FileHandle } from 'node:fs/promises';

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = constants;

/** A name of one directory entry: not empty, no slash, not `.` or `..`. */
function checkName(name: string): void {
  if (!name || name.includes('/') || name === '.' || name === '..' || name.includes('\0')) {
    throw Object.assign(new Error(`not a plain file name: ${JSON.stringify(name)}`), { code: 'EINVAL' });
  }
}

const beneath = (dir: FileHandle, name: string) => {
  checkName(name);
  return `/proc/self/fd/${dir.fd}/${name}`;
};

/**
 * The directory `names` leads to beneath `root` (a path of the agent's own), opened. A link or anything
 * but a directory on the way fails (ELOOP, ENOTDIR). With `create`, missing directories are made, mode
 * 0777 whatever the umask: the instance (another user, or a container's mapped root) writes in them too.
 */
export async function openDirBeneath(root: string, names: string[], create = false): Promise<FileHandle> {
  let dir = await open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  try {
    for (const name of names) {
      const path = beneath(dir, name);
      const made = create && await mkdir(path).then(() => true, (error: NodeJS.ErrnoException) => {
        if (error.code === 'EEXIST') return false;
        throw error;
      });
      const next = await open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
      await dir.close();
      dir = next;
      if (made) await dir.chmod(0o777);
    }
    return dir;
  } catch (error) {
    await dir.close();
    throw error;
  }
}

/** The entries of an open directory, with their kinds (a link is a link, never what it points to). */
export function listDir(dir: FileHandle) {
  return readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true });
}

/** Opens a regular file in an open directory for reading, or undefined when it is missing or anything else. */
export async function openRegularIn(dir: FileHandle, name: string): Promise<{ file: FileHandle; stats: Stats } | undefined> {
  let file: FileHandle;
  try {
    file = await open(beneath(dir, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch {
    return undefined; // missing, a link (ELOOP), or a FIFO without a writer (ENXIO)
  }
  const stats = await file.stat();
  if (stats.isFile()) return { file, stats };
  await file.close();
  return undefined;
}

/** A regular file beneath `root`, opened for reading (see openRegularIn), or undefined. */
export async function openRegularBeneath(root: string, names: string[]): Promise<{ file: FileHandle; stats: Stats } | undefined> {
  let dir: FileHandle;
  try {
    dir = await openDirBeneath(root, names.slice(0, -1));
  } catch {
    return undefined;
  }
  try {
    return await openRegularIn(dir, names[names.length - 1]);
  } finally {
    await dir.close();
  }
}

export interface SmallFile {
  text: string;
  mtimeMs: number;
  size: number;
}

/**
 * A regular file beneath `root` as text, or undefined when it is missing, not a regular file or larger than
 * `maxBytes`. `unchanged` lets a poller skip the read when size and modification time are what it saw.
 */
export async function readSmallFile(root: string, names: string[], maxBytes: number,
  unchanged?: (stats: Stats) => boolean): Promise<SmallFile | 'unchanged' | undefined> {
  const opened = await openRegularBeneath(root, names);
  if (!opened) return undefined;
  const { file, stats } = opened;
  try {
    if (unchanged?.(stats)) return 'unchanged';
    if (stats.size > maxBytes) return undefined;
    const buffer = Buffer.alloc(stats.size + 1);
    const { bytesRead } = await file.read(buffer, 0, buffer.length, 0);
    if (bytesRead > maxBytes) return undefined; // it grew meanwhile
    return { text: buffer.toString('utf8', 0, bytesRead), mtimeMs: stats.mtimeMs, size: stats.size };
  } finally {
    await file.close();
  }
}

/** Creates a new file in an open directory for writing (it must not exist: no link or FIFO can be in its place). */
export function createFileIn(dir: FileHandle, name: string, mode = 0o644): Promise<FileHandle> {
  return open(beneath(dir, name), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, mode);
}

/** How deep removeBeneath descends: a tenant can make a tree deeper than any agent wants to hold open. */
const MAX_DEPTH = 32;

/**
 * Removes `name` in `root` and all beneath it without following a link anywhere (a link is removed, not
 * what it points to). A tree deeper than MAX_DEPTH is left with an error.
 */
export async function removeBeneath(root: string, name: string): Promise<void> {
  const dir = await open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  try {
    await removeIn(dir, name, 0);
  } finally {
    await dir.close();
  }
}

async function removeIn(parent: FileHandle, name: string, depth: number): Promise<void> {
  const path = beneath(parent, name);
  const dir = await open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW).catch(() => undefined);
  if (!dir) return unlink(path).catch((error: NodeJS.ErrnoException) => { if (error.code !== 'ENOENT') throw error; });
  try {
    if (depth >= MAX_DEPTH) throw new Error(`deeper than ${MAX_DEPTH} levels`);
    for (const entry of await listDir(dir)) await removeIn(dir, entry.name, depth + 1);
  } finally {
    await dir.close();
  }
  await rmdir(path);
}
