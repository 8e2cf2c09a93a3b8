// Sample function "error": POST /error {"status": 503, "message": "overloaded"} answers with that status
// and {"error": message} (defaults 500, "boom"). Shows how failures reach the caller: the platform passes
// the `error` field on as the problem's detail.
import http from 'node:http';

const inferencePort = Number(process.env.INFERENCE_PORT ?? process.env.PORT ?? 8000);
const healthPort = Number(process.env.HEALTH_PORT ?? inferencePort);

const server = http.createServer(async (req, res) => {
  if (req.method === 'GET' && req.url === '/health') return reply(res, 200, { status: 'ok' });
  if (req.method !== 'POST' || req.url !== '/error') return reply(res, 404, { error: `no route ${req.method} ${req.url}` });
  let body: { status?: unknown; message?: unknown } | null;
  try {
    body = await readJson(req) as typeof body;
  } catch {
    return reply(res, 400, { error: 'the body must be JSON' });
  }
  const status = Number.isInteger(body?.status) && Number(body?.status) >= 200 && Number(body?.status) <= 599 ? Number(body?.status) : 500;
  reply(res, status, { error: typeof body?.message === 'string' ? body.message : 'boom' });
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
