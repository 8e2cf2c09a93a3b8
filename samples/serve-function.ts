// What every sample function shares, and all a function of your own needs from the platform: serve one
// POST route on INFERENCE_PORT (or PORT), answer GET /health on HEALTH_PORT too (the same port unless the
// function's health.port differs), and on SIGTERM finish what is in flight and exit.
import http from 'node:http';

export type Handler<Body> = (body: Body | null, req: http.IncomingMessage, res: http.ServerResponse) => unknown;

export function serveFunction<Body>(route: string, handle: Handler<Body>): void {
  const inferencePort = Number(process.env.INFERENCE_PORT ?? process.env.PORT ?? 8000);
  const healthPort = Number(process.env.HEALTH_PORT ?? inferencePort);
  const server = http.createServer(async (req, res) => {
    if (req.method === 'GET' && req.url === '/health') return reply(res, 200, { status: 'ok' });
    if (req.method !== 'POST' || req.url !== route) return reply(res, 404, { error: `no route ${req.method} ${req.url}` });
    let body: Body | null;
    try {
      body = await readJson(req) as Body | null;
    } catch {
      return reply(res, 400, { error: 'the body must be JSON' });
    }
    await handle(body, req, res);
  }).listen(inferencePort);
  const health = healthPort === inferencePort ? undefined : http.createServer((req, res) =>
    reply(res, req.url === '/health' ? 200 : 404, { status: 'ok' })).listen(healthPort);
  // The platform kills after the grace period; until then, let requests in flight finish.
  process.on('SIGTERM', () => {
    server.close();
    server.closeIdleConnections();
    health?.close();
  });
}

export function reply(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text ? JSON.parse(text) : null;
}
