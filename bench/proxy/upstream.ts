// The benchmark's platform stand-in, run as its own process: a TLS WebSocket server that greets each
// connection with one message and echoes every frame. Both proxies under test sit in front of it.
// It also counts, per request path, how many upgrades came over a resumed TLS session
// (GET /stats), so the bench can show whether each proxy reuses its upstream TLS sessions.
// Env: BENCH_UPSTREAM_CERT, BENCH_UPSTREAM_KEY (PEM files). Prints `listening <port>` when ready.
import { readFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { WebSocketServer } from 'ws';

const upgrades: Record<string, { total: number; resumed: number }> = {};
const server = https.createServer({
  cert: readFileSync(process.env.BENCH_UPSTREAM_CERT ?? ''),
  key: readFileSync(process.env.BENCH_UPSTREAM_KEY ?? ''),
}, (req, res) => {
  res.writeHead(req.url === '/stats' ? 200 : 404, { 'content-type': 'application/json' });
  res.end(JSON.stringify(upgrades));
});
const wss = new WebSocketServer({ server, perMessageDeflate: false });
wss.on('connection', (ws, req) => {
  const counts = upgrades[(req.url ?? '/').split('?')[0]] ??= { total: 0, resumed: 0 };
  counts.total++;
  if ((req.socket as TLSSocket).isSessionReused()) counts.resumed++;
  ws.send('hello');
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`);
});
process.on('SIGTERM', () => process.exit(0));
