// Sample function "echo": POST /echo answers 200 with the JSON body it received and the svc-* headers the
// platform added (request id, function ids, output directory...). The smallest template to copy, with
// serve-function.ts.
import { reply, serveFunction } from './serve-function.ts';

serveFunction<unknown>('/echo', (body, req, res) => {
  const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => name.startsWith('svc-')));
  reply(res, 200, { echo: body, headers });
});
