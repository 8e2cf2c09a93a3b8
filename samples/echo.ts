// Sample function "echo": POST /echo answers 200 with the JSON body it received and the svc-* headers the
// platform added (request id, function ids, output directory...). The smallest template to copy, with
// serve-function.ts. ECHO_HEADERS=false answers the body alone: the same answer whichever proxy the
// request came through (bench/invoke).
import { reply, serveFunction } from './serve-function.ts';

const withHeaders = process.env.ECHO_HEADERS !== 'false';

serveFunction<unknown>('/echo', (body, req, res) => {
  if (!withHeaders) return reply(res, 200, { echo: body });
  const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => name.startsWith('svc-')));
  reply(res, 200, { echo: body, headers });
});
