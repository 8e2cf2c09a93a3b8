// Progress of running tasks: each writes SVC_PROGRESS_FILE_PATH as {"progress": 0-100} (the invocation
// plane's progress shape, compute/progress.ts) or the reference's {"percentComplete": 0-100, ...}. One
// poller per agent checks every running task's file each interval (an open and a stat each; the file is
// read only when its size or mtime changed) and hands changes to the task: percentComplete, and the file's mtime as
// lastHeartbeatAt. A half-written file is skipped and read again on the next tick.
import path from 'node:path';
import { readSmallFile } from './safe-fs.ts';
import { z } from 'zod';

export interface TaskProgress {
  percent: number;
  /** When the task last wrote the file. */
  at: Date;
}

interface Seen {
  mtimeMs: number;
  size: number;
}

const MAX_PROGRESS_BYTES = 64 * 1024;

/** A task's progress file: lenient, as tasks write it (a number or a numeric string, either name). */
const taskProgressFile = z.object({ progress: z.unknown(), percentComplete: z.unknown() }).partial();

/** {percent} from a progress file's text, or undefined when it is not (yet) a JSON object. */
export function parseTaskProgress(text: string): number | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  const file = taskProgressFile.safeParse(body);
  if (!file.success) return undefined;
  const { progress, percentComplete } = file.data;
  const value = Number(percentComplete ?? progress ?? 0);
  return Number.isFinite(value) ? Math.round(Math.min(100, Math.max(0, value))) : 0;
}

export interface ProgressTarget {
  readonly progressFile: string;
  readonly running: boolean;
  progress(percent: number, at: Date): void;
}

/** Polls the progress files of `targets()` every intervalMs until stopped. */
export function pollTaskProgress(targets: () => Iterable<[string, ProgressTarget]>, intervalMs: number): { stop(): void } {
  const seen = new Map<string, Seen>();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;

  async function tick(): Promise<void> {
    const present = new Set<string>();
    for (const [id, target] of targets()) {
      if (stopped) return;
      if (!target.running) continue;
      present.add(id);
      const change = await readChanged(target.progressFile, seen.get(id));
      if (!change) continue;
      seen.set(id, change.seen);
      if (change.percent !== undefined) target.progress(change.percent, new Date(change.seen.mtimeMs));
    }
    for (const id of seen.keys()) if (!present.has(id)) seen.delete(id);
  }

  const loop = () => {
    tick().catch(() => {}).finally(() => {
      if (!stopped) timer = setTimeout(loop, intervalMs);
    });
  };
  timer = setTimeout(loop, intervalMs);
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** The progress file now, whatever was seen before (the last word after a task exits). */
export async function readTaskProgress(file: string): Promise<TaskProgress | undefined> {
  const change = await readChanged(file, undefined);
  return change?.percent === undefined ? undefined : { percent: change.percent, at: new Date(change.seen.mtimeMs) };
}

/** The task writes its progress directory: the file is read through safe-fs.ts (no link, no FIFO, small). */
async function readChanged(file: string, before: Seen | undefined): Promise<{ seen: Seen; percent?: number } | undefined> {
  const read = await readSmallFile(path.dirname(file), [path.basename(file)], MAX_PROGRESS_BYTES,
    (info) => before?.mtimeMs === info.mtimeMs && before.size === info.size);
  if (!read || read === 'unchanged') return undefined; // not written (yet), unchanged, or not a small regular file
  const percent = parseTaskProgress(read.text);
  // Half-written: leave `seen` as it was so the next tick reads it again.
  if (percent === undefined) return undefined;
  return { seen: { mtimeMs: read.mtimeMs, size: read.size }, percent };
}
