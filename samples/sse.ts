// Sample function "sse": POST /stream {"count": 5, "intervalMs": 200} answers text/event-stream and sends
// events {"n": 1} ... {"n": count}, one every intervalMs, each flushed as it is produced, then ends.
// The template for streaming tokens or partial results: the platform relays each event as it arrives.
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

const inferencePort = Number(process.env.INFERENCE_PORT ?? process.env.PORT ?? 8000);
const healthPort = Number(process.env.HEALTH_PORT ?? inferencePort);

const server = http.createServer(async (req, res) => {
  if (req.method === 'GET' && req.url === '/health') return reply(res, 200, { status: 'ok' });
  if (req.method !== 'POST' || req.url !== '/stream') return reply(res, 404, { error: `no route ${req.method} ${req.url}` });
  let body: { count?: unknown; intervalMs?: unknown } | null;
  try {
    body = await readJson(req) as typeof body;
  } catch {
    return reply(res, 400, { error: 'the body must be JSON' });
  }
  const count = Number.isInteger(body?.count) ? Number(body?.count) : 5;
  const intervalMs = typeof body?.intervalMs === 'number' ? body.intervalMs : 200;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  let gone = false;
  res.on('close', () => { gone = true; });
  for (let n = 1; n <= count && !gone; n++) {
    if (n > 1) await sleep(intervalMs);
    res.write(`data: ${JSON.stringify({ n })}\n\n`);
  }
  res.end();
});

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
