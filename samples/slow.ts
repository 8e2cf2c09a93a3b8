// Sample function "slow": POST /slow {"seconds": 3} works for that long (default 5), reporting progress
// as it goes, then answers 200 {"done": true, "seconds": 3}. Progress is a file: the platform names a
// directory for each request in the svc-large-output-dir header, and whatever the function writes to
// <that dir>/progress as {"id": <request id>, "progress": 0-100, "partialResponse": {...}} reaches a
// polling caller as a 202 with SVC-PERCENT-COMPLETE and the partial response as its body.
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { reply, serveFunction } from './serve-function.ts';

const STEP_MS = 200;

serveFunction<{ seconds?: unknown }>('/slow', async (body, req, res) => {
  const seconds = typeof body?.seconds === 'number' && body.seconds >= 0 ? body.seconds : 5;
  const outputDir = req.headers['svc-large-output-dir'] as string | undefined;
  const requestId = req.headers['svc-reqid'] as string | undefined;
  const steps = Math.max(1, Math.round((seconds * 1000) / STEP_MS));
  for (let step = 1; step <= steps; step++) {
    await sleep(STEP_MS);
    if (outputDir) await writeProgress(outputDir, { id: requestId, progress: Math.round((step / steps) * 100), partialResponse: { step } });
  }
  reply(res, 200, { done: true, seconds });
});

/** Write-then-rename, so the platform never reads half a file. */
async function writeProgress(dir: string, progress: unknown): Promise<void> {
  await mkdir(dir, { recursive: true });
  const temporary = path.join(dir, '.progress.tmp');
  await writeFile(temporary, JSON.stringify(progress));
  await rename(temporary, path.join(dir, 'progress'));
}
