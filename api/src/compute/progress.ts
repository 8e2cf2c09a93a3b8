// Progress of long requests (wire-reference 5): the invocation plane gives each request the directory
// <outputDir>/<requestId> (header SVC-LARGE-OUTPUT-DIR); the container writes <that dir>/progress as
// {"id":"<requestId>","progress":42,"partialResponse":{...}}, creating the directory if missing. This
// watcher polls the output directory (cheap: one readdir and one stat per request) and emits a report
// only when a file's content changes. A half-written file is skipped and read again on the next tick.
// Request directories untouched for maxAgeMs are removed.
import { readdir, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../logger.ts';
import type { ProgressReport } from './protocol.ts';
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
    const file = path.join(options.outputDir, requestId, 'progress');
    let info;
    try {
      info = await stat(file);
    } catch {
      return; // no progress written for this request (yet)
    }
    const before = seen.get(requestId);
    if (before && before.mtimeMs === info.mtimeMs && before.size === info.size) return;
    const text = await readFile(file, 'utf8').catch(() => undefined);
    if (text === undefined || text === before?.text) {
      if (text !== undefined) seen.set(requestId, { mtimeMs: info.mtimeMs, size: info.size, text });
      return;
    }
    const progress = parseProgress(text);
    if (!progress) return; // probably half-written; read again next tick
    seen.set(requestId, { mtimeMs: info.mtimeMs, size: info.size, text });
    if (stopped) return;
    options.emit({ requestId, instanceId: options.instanceId, ...progress });
  }

  async function sweep(requestIds: Set<string>): Promise<void> {
    const now = Date.now();
    for (const requestId of requestIds) {
      const dir = path.join(options.outputDir, requestId);
      const info = await stat(dir).catch(() => undefined);
      const touched = Math.max(info?.mtimeMs ?? 0, seen.get(requestId)?.mtimeMs ?? 0);
      if (info && now - touched > maxAgeMs) {
        await rm(dir, { recursive: true, force: true }).catch(() => {});
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
