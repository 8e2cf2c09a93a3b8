// bench/invoke: POST /v2/svc/pexec through the gateway, next to the same echo instance called directly,
// through nginx (Debian) proxy_pass with upstream keep-alive, and through the barest Node.js proxy (an
// http server forwarding with undici: the ceiling of any Node implementation on this machine), at
// concurrency 1, 32 and 256. Targets: added p50 ≤ 1 ms at c=1; ≥ 0.7× nginx req/s at c=32.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { request } from '../../api/test/helpers/http.ts';
import { servePlatform } from '../../api/test/helpers/served.ts';
import { load, type LoadTarget } from '../lib/load.ts';
import { printTable } from '../lib/report.ts';
import { freePort } from '../../api/test/helpers/wait.ts';

const NGINX = '/usr/sbin/nginx';
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const LEVELS = (process.env.BENCH_LEVELS ?? '1,32,256').split(',').map(Number);
/** BENCH_PROFILE=<dir>: svc serve writes a V8 CPU profile there when it stops (node --cpu-prof). */
const PROFILE = process.env.BENCH_PROFILE;
const BODY = JSON.stringify({ message: 'hello', n: 42 });

async function startNginx(upstreamPort: number): Promise<{ port: number; process: ChildProcess }> {
  if (!existsSync(NGINX)) throw new Error('bench/invoke needs nginx: apt-get install nginx-light');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-nginx-'));
  const port = await freePort();
  writeFileSync(path.join(dir, 'nginx.conf'), `
worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}; proxy_temp_path ${dir}; fastcgi_temp_path ${dir}; uwsgi_temp_path ${dir}; scgi_temp_path ${dir};
  upstream echo { server 127.0.0.1:${upstreamPort}; keepalive 256; }
  server {
    listen 127.0.0.1:${port};
    location / { proxy_pass http://echo/echo; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
`);
  const child = spawn(NGINX, ['-c', path.join(dir, 'nginx.conf'), '-p', dir], { stdio: 'inherit' });
  await sleep(300);
  return { port, process: child };
}

/** The barest Node.js reverse proxy, in its own process: read the body, forward with undici, answer. */
async function startBareNodeProxy(upstreamPort: number): Promise<{ port: number; process: ChildProcess }> {
  const port = await freePort();
  const source = `
    import http from 'node:http';
    import { Pool } from 'undici';
    const pool = new Pool('http://127.0.0.1:${upstreamPort}', { connections: 256 });
    http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (chunk) => chunks.push(chunk));
      req.on('end', async () => {
        const upstream = await pool.request({ path: '/echo', method: 'POST', headers: { 'content-type': 'application/json' }, body: Buffer.concat(chunks) });
        const body = Buffer.from(await upstream.body.arrayBuffer());
        res.writeHead(upstream.statusCode, { 'content-type': 'application/json', 'content-length': body.length }).end(body);
      });
    }).listen(${port}, '127.0.0.1');`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', source], { stdio: 'inherit', cwd: path.resolve(import.meta.dirname, '../..') });
  await sleep(500);
  return { port, process: child };
}

const platform = await servePlatform({
  SVC_LOG_LEVEL: 'warn',
  ...(PROFILE ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${path.resolve(PROFILE)}` } : {}),
});
let nginx: ChildProcess | undefined;
let bareNode: ChildProcess | undefined;
try {
  const { token, apiKey } = await platform.credentials(['invoke_function', 'list_functions']);
  const api = (method: string, url: string, options: Record<string, unknown>) => request(platform.url, method, url, { host: 'api.localhost', ...options });
  const fn = (await api('POST', '/v2/svc/functions', {
    bearer: token,
    body: { name: 'bench-echo', containerImage: 'local/echo:1', inferenceUrl: '/echo', inferencePort: 8000, health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT5S', expectedStatusCode: 200 } },
  })).body.function;
  await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
    bearer: token, body: { deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 1024 }] },
  });
  while ((await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token })).body.function.status !== 'ACTIVE') await sleep(100);
  // The instance's own address is internal; read it where the control plane keeps it.
  const store = new Database(path.join(platform.dataDir, 'svc.db'), { readonly: true });
  const row = store.prepare('select endpoint from instances where version_id = ? and desired = 1').get(fn.versionId) as { endpoint: string };
  store.close();
  const echoPort = (JSON.parse(row.endpoint) as { ports: { inference: number } }).ports.inference;
  const started = await startNginx(echoPort);
  nginx = started.process;
  const bare = await startBareNodeProxy(echoPort);
  bareNode = bare.process;

  const json = { 'content-type': 'application/json' };
  const targets: Record<string, LoadTarget> = {
    'direct to the instance': { origin: `http://127.0.0.1:${echoPort}`, path: '/echo', headers: json, body: BODY },
    'nginx proxy_pass': { origin: `http://127.0.0.1:${started.port}`, path: '/', headers: json, body: BODY },
    'bare Node.js proxy': { origin: `http://127.0.0.1:${bare.port}`, path: '/echo', headers: json, body: BODY },
    'svc pexec (gateway)': {
      origin: `http://127.0.0.1:${platform.port}`, path: `/v2/svc/pexec/functions/${fn.id}`, body: BODY,
      headers: { ...json, host: 'api.localhost', authorization: `Bearer ${apiKey}` },
    },
  };
  for (const target of Object.values(targets)) await load(target, 8, 1);
  const rows: (string | number)[][] = [];
  const summary: string[] = [];
  for (const concurrency of LEVELS) {
    const results = Object.fromEntries(await (async () => {
      const out: [string, Awaited<ReturnType<typeof load>>][] = [];
      for (const [name, target] of Object.entries(targets)) out.push([name, await load(target, concurrency, SECONDS)]);
      return out;
    })());
    const ours = results['svc pexec (gateway)'];
    for (const [name, result] of Object.entries(results)) {
      rows.push([`c=${concurrency}  ${name}`, result.requestsPerSecond, result.p50, result.p99, result.requestsPerSecond / results['nginx proxy_pass'].requestsPerSecond, result.errors]);
    }
    summary.push(`c=${concurrency}: added p50 ${(ours.p50 - results['direct to the instance'].p50).toFixed(2)} ms over direct; ${(ours.requestsPerSecond / results['nginx proxy_pass'].requestsPerSecond).toFixed(2)}× nginx req/s; bare Node.js proxy ${(results['bare Node.js proxy'].requestsPerSecond / results['nginx proxy_pass'].requestsPerSecond).toFixed(2)}× nginx`);
  }
  printTable(`bench/invoke: ${SECONDS} s per row, echo sample, closed-loop clients (node ${process.version})`,
    ['concurrency  path', 'req/s', 'p50 ms', 'p99 ms', '× nginx', 'errors'], rows);
  console.log(summary.join('\n'));
  console.log('targets: added p50 ≤ 1 ms at c=1; ≥ 0.7× nginx req/s at c=32');
} finally {
  nginx?.kill('SIGTERM');
  bareNode?.kill('SIGTERM');
  await platform.stop();
}
