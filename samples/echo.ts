// Sample function "echo": POST /echo answers 200 with the JSON body it received and the svc-* headers the
// platform added (request id, function ids, output directory...). The smallest template to copy.
// Ports come from the platform: INFERENCE_PORT (or PORT) for requests, HEALTH_PORT for GET /health.
import http from 'node:http';

const inferencePort = Number(process.env.INFERENCE_PORT ?? process.env.PORT ?? 8000);
const healthPort = Number(process.env.HEALTH_PORT ?? inferencePort);

const server = http.createServer(async (req, res) => {
  if (req.method === 'GET' && req.url === '/health') return reply(res, 200, { status: 'ok' });
  if (req.method !== 'POST' || req.url !== '/echo') return reply(res, 404, { error: `no route ${req.method} ${req.url}` });
  let body: unknown;
  try {
    body = await readJson(req);
  } catch {
    return reply(res, 400, { error: 'the body must be JSON' });
  }
  const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => name.startsWith('svc-')));
  reply(res, 200, { echo: body, headers });
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
// Finish what is in flight, then exit: the platform sends SIGTERM before it kills.
process.on('SIGTERM', () => {
  server.close();
  server.closeIdleConnections();
  health?.close();
});
