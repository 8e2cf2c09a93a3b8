// Progress of long requests (wire-reference 5): the invocation plane gives each request the directory
// <outputDir>/<requestId> (header SVC-LARGE-OUTPUT-DIR); the container writes <that dir>/progress as
// {"id":"<requestId>","progress":42,"partialResponse":{...}}, creating the directory if missing. This
// watcher polls the output directory (cheap: one readdir and one stat per request) and emits a report
// only when a file's content changes. A half-written file is skipped and read again on the next tick.
// Request directories untouched for maxAgeMs are removed. The output directory is the instance's to write,
// so everything in it is opened through safe-fs.ts: never a link, never a FIFO, at most MAX_PROGRESS_BYTES.
import { lstat, readdir } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../logger.ts';
import type { ProgressReport } from './protocol.ts';
import { readSmallFile, removeBeneath } from './safe-fs.ts';
import { z } from 'zod';

export interface ProgressWatchOptions {
  instanceId: string;
  outputDir: string;
  emit(progress: ProgressReport): void;
  log: Logger;
  intervalMs?: number;
  maxAgeMs?: number;
}

export interface ProgressWatch {
  stop(): void;
}

const SWEEP_EVERY_MS = 60_000;
/** A progress file larger than this (its partial response included) is not read. */
const MAX_PROGRESS_BYTES = 1024 * 1024;

interface Seen {
  mtimeMs: number;
  size: number;
  text?: string;
}

export function watchProgress(options: ProgressWatchOptions): ProgressWatch {
  const intervalMs = options.intervalMs ?? 200;
  const maxAgeMs = options.maxAgeMs ?? 3_600_000;
  const seen = new Map<string, Seen>();
  let lastSweep = 0; // the first tick sweeps what an earlier run left
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;

  async function tick(): Promise<void> {
    try {
      const entries = await readdir(options.outputDir, { withFileTypes: true });
      const present = new Set(entries.filter((entry) => entry.isDirectory()).map((entry) => entry.name));
      if (Date.now() - lastSweep >= SWEEP_EVERY_MS) {
        lastSweep = Date.now();
        await sweep(present);
      }
      for (const requestId of present) {
        if (stopped) break;
        await check(requestId);
      }
      for (const requestId of seen.keys()) if (!present.has(requestId)) seen.delete(requestId);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') options.log.warn({ err: error }, 'progress watch failed');
    }
    if (!stopped) timer = setTimeout(tick, intervalMs);
  }

  async function check(requestId: string): Promise<void> {
    const before = seen.get(requestId);
    const read = await readSmallFile(options.outputDir, [requestId, 'progress'], MAX_PROGRESS_BYTES,
      (info) => before?.mtimeMs === info.mtimeMs && before.size === info.size);
    if (!read || read === 'unchanged') return; // none written (yet), unchanged, or not a small regular file
    const { text, mtimeMs, size } = read;
    if (text === before?.text) {
      seen.set(requestId, { mtimeMs, size, text });
      return;
    }
    const progress = parseProgress(text);
    if (!progress) return; // probably half-written; read again next tick
    seen.set(requestId, { mtimeMs, size, text });
    if (stopped) return;
    options.emit({ requestId, instanceId: options.instanceId, ...progress });
  }

  async function sweep(requestIds: Set<string>): Promise<void> {
    const now = Date.now();
    for (const requestId of requestIds) {
      const info = await lstat(path.join(options.outputDir, requestId)).catch(() => undefined);
      const touched = Math.max(info?.mtimeMs ?? 0, seen.get(requestId)?.mtimeMs ?? 0);
      if (info && now - touched > maxAgeMs) {
        await removeBeneath(options.outputDir, requestId).catch((error: unknown) => options.log.warn({ err: error, requestId }, 'request directory not removed'));
        seen.delete(requestId);
        requestIds.delete(requestId);
      }
    }
  }

  timer = setTimeout(tick, 0);
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** A request's progress file (wire-reference 5), read leniently: a number or a numeric string. */
const progressFile = z.object({ progress: z.unknown(), partialResponse: z.unknown() }).partial();

/** {percent, partialResponse} from a progress file, or undefined when it is not (yet) a JSON object. */
export function parseProgress(text: string): { percent: number; partialResponse?: unknown } | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  const file = progressFile.safeParse(body);
  if (!file.success) return undefined;
  const { progress, partialResponse } = file.data;
  const value = Number(progress ?? 0);
  const percent = Number.isFinite(value) ? Math.min(100, Math.max(0, value)) : 0;
  return partialResponse === undefined ? { percent } : { percent, partialResponse };
}
