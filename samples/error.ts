// Sample function "error": POST /error {"status": 503, "message": "overloaded"} answers with that status
// and {"error": message} (defaults 500, "boom"). Shows how failures reach the caller: the platform passes
// the `error` field on as the problem's detail.
import { reply, serveFunction } from './serve-function.ts';

serveFunction<{ status?: unknown; message?: unknown }>('/error', (body, _req, res) => {
  const status = Number.isInteger(body?.status) && Number(body?.status) >= 200 && Number(body?.status) <= 599 ? Number(body?.status) : 500;
  reply(res, status, { error: typeof body?.message === 'string' ? body.message : 'boom' });
});
