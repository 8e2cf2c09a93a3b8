// Sample function "echo": POST /echo answers 200 with the JSON body it received and the svc-* headers the
// platform added (request id, function ids, output directory...). The smallest template to copy, with
// serve-function.ts. ECHO_HEADERS=false answers the body alone: the same answer whichever proxy the
// request came through (bench/invoke); ECHO_DELAY_MS answers that long after (a request that holds its
// slot, bench/invoke/capacity.ts).
import { setTimeout as sleep } from 'node:timers/promises';
import { reply, serveFunction } from './serve-function.ts';

const withHeaders = process.env.ECHO_HEADERS !== 'false';
const delayMs = Number(process.env.ECHO_DELAY_MS ?? 0);
if (!Number.isFinite(delayMs) || delayMs < 0) {
  console.error(`ECHO_DELAY_MS must be a number of milliseconds, 0 or more (got '${process.env.ECHO_DELAY_MS}')`);
  process.exit(1);
}

serveFunction<unknown>('/echo', async (body, req, res) => {
  if (delayMs > 0) await sleep(delayMs);
  if (!withHeaders) return reply(res, 200, { echo: body });
  const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => name.startsWith('svc-')));
  reply(res, 200, { echo: body, headers });
});
