// Sample function "sse": POST /stream {"count": 5, "intervalMs": 200} answers text/event-stream and sends
// events {"n": 1} ... {"n": count}, one every intervalMs, each flushed as it is produced, then ends.
// The template for streaming tokens or partial results: the platform relays each event as it arrives.
import { setTimeout as sleep } from 'node:timers/promises';
import { serveFunction } from './serve-function.ts';

serveFunction<{ count?: unknown; intervalMs?: unknown }>('/stream', async (body, _req, res) => {
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

