// Bench function: POST /work {"ms": N} holds the request N ms and answers {"pid": <this process>}, so the
// bench can tell which instance served each request.
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

const port = Number(process.env.INFERENCE_PORT ?? 8000);

http.createServer(async (req, res) => {
  if (req.url === '/health') return res.writeHead(200).end('ok');
  let text = '';
  for await (const chunk of req) text += chunk;
  const { ms = 0 } = (text ? JSON.parse(text) : {}) as { ms?: number };
  await sleep(ms);
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ pid: process.pid }));
}).listen(port);
