// Sample function "slow": POST /slow {"seconds": 3} works for that long (default 5), reporting progress
// as it goes, then answers 200 {"done": true, "seconds": 3}. Progress is a file: the platform names a
// directory for each request in the svc-large-output-dir header, and whatever the function writes to
// <that dir>/progress as {"id": <request id>, "progress": 0-100, "partialResponse": {...}} reaches a
// polling caller as a 202 with SVC-PERCENT-COMPLETE and the partial response as its body.
import { mkdir, rename, writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const inferencePort = Number(process.env.INFERENCE_PORT ?? process.env.PORT ?? 8000);
const healthPort = Number(process.env.HEALTH_PORT ?? inferencePort);
const STEP_MS = 200;

const server = http.createServer(async (req, res) => {
  if (req.method === 'GET' && req.url === '/health') return reply(res, 200, { status: 'ok' });
  if (req.method !== 'POST' || req.url !== '/slow') return reply(res, 404, { error: `no route ${req.method} ${req.url}` });
  let body: { seconds?: unknown } | null;
  try {
    body = await readJson(req) as typeof body;
  } catch {
    return reply(res, 400, { error: 'the body must be JSON' });
  }
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

function reply(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text ? JSON.parse(text) : null;
}

server.listen(inferencePort);
const health = healthPort === inferencePort ? undefined : http.createServer((req, res) =>
  reply(res, req.url === '/health' ? 200 : 404, { status: 'ok' })).listen(healthPort);
process.on('SIGTERM', () => {
  server.close();
  server.closeIdleConnections();
  health?.close();
});
