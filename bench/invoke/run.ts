// bench/invoke: POST /v2/svc/pexec through the gateway, next to the same echo instance called directly,
// through nginx (Debian) proxy_pass with upstream keep-alive, and through the barest Node.js proxy (an
// http server forwarding with undici: the ceiling of any Node implementation on this machine), at
// concurrency 1, 32 and 256, in rounds (medians reported). A second bare proxy also sends and answers the
// SVC-* headers the platform must: it shows which part of a gap is the wire contract's, paid by the echo
// and the client, not the proxy's. With PostgreSQL reachable and nats-server installed, a last row per
// level: two API replicas on them (a NATS server of the bench's own, with a user and password) behind a
// round-robin client.
// Targets: c=32 ≥ 0.85× the bare Node.js proxy (≥ 0.8× nginx); added p50 at c=1 ≤ 0.15 ms; c=256 ≥ 0.8× the bare proxy.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { createDatabase, postgresAvailable, type TestDatabase } from '../../api/test/helpers/databases.ts';
import { natsServerAvailable, startNats, type TestNats } from '../../api/test/helpers/nats.ts';
import { servePlatform, type ServedPlatform } from '../../api/test/helpers/served.ts';
import { freePort } from '../../api/test/helpers/wait.ts';
import { BODY, deployEcho, JSON_TYPE } from '../lib/echo.ts';
import { cpuMicros } from '../lib/cpu.ts';
import { load, type LoadTarget } from '../lib/load.ts';
import { median, printTable } from '../lib/report.ts';

const NGINX = '/usr/sbin/nginx';
const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
/**
 * Rows are measured in rounds, each path once per round in turn, and reported as medians: on a shared
 * 2-core machine the speed drifts by a fifth within a minute, more than the gaps measured here.
 */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const LEVELS = (process.env.BENCH_LEVELS ?? '1,32,256').split(',').map(Number);
/** BENCH_PROFILE=<dir>: svc serve writes a V8 CPU profile there when it stops (node --cpu-prof). */
const PROFILE = process.env.BENCH_PROFILE;
const CONTRACT_ROW = 'bare Node.js proxy, svc headers';

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

/**
 * What the platform must add to an exchange and the barest proxy does not (wire-reference 5): the SVC-*
 * headers each request carries to its container (values as long as the platform's), and those each answer
 * carries to its client.
 */
const CONTRACT = `
  const fixed = {
    'svc-ncaid': 'accountidaccountidaccountidaccountid1234567', 'svc-function-name': 'bench-echo', 'svc-function-id': randomUUID(),
    'svc-function-version-id': randomUUID(), 'svc-max-response-size-bytes': '5242880', 'svc-backend': 'local',
    'svc-instancetype': 'LOCAL.CPU_1x', 'svc-region': 'local', 'svc-env': 'svc',
  };
  const toContainer = (id) => ({
    'content-type': 'application/json', 'svc-reqid': id, 'svc-sub': 'ownerOfTheCredential123',
    'svc-asset-dir': '/tmp/svc/instances/' + id + '/assets', 'svc-large-output-dir': '/tmp/svc/instances/' + id, ...fixed,
  });
  const toClient = (id, length) => ({
    'content-type': 'application/json', 'content-length': length, 'x-request-id': id, 'svc-reqid': id, 'svc-status': 'fulfilled',
    'access-control-expose-headers': 'svc-reqid, svc-status, svc-percent-complete',
  });`;
const BARE = `
  const toContainer = () => ({ 'content-type': 'application/json' });
  const toClient = (id, length) => ({ 'content-type': 'application/json', 'content-length': length });`;

/**
 * The barest Node.js reverse proxy, in its own process: read the body, forward with undici, answer. With
 * `contract`, it also sends and answers the platform's headers: the same bytes on the wire as svc.
 */
async function startBareNodeProxy(upstreamPort: number, contract: boolean): Promise<{ port: number; process: ChildProcess }> {
  const port = await freePort();
  const source = `
    import http from 'node:http';
    import { randomUUID } from 'node:crypto';
    import { Pool } from 'undici';
    ${contract ? CONTRACT : BARE}
    const pool = new Pool('http://127.0.0.1:${upstreamPort}', { connections: 256 });
    http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (chunk) => chunks.push(chunk));
      req.on('end', async () => {
        const id = ${contract ? 'randomUUID()' : "''"};
        const upstream = await pool.request({ path: '/echo', method: 'POST', headers: toContainer(id), body: Buffer.concat(chunks) });
        const body = Buffer.from(await upstream.body.arrayBuffer());
        res.writeHead(upstream.statusCode, toClient(id, body.length)).end(body);
      });
    }).listen(${port}, '127.0.0.1');`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', source], { stdio: 'inherit', cwd: path.resolve(import.meta.dirname, '../..') });
  await sleep(500);
  return { port, process: child };
}

type Measured = Awaited<ReturnType<typeof load>> & { cpu?: number };

/** Each figure's median over the rounds (errors summed). */
function medianOf(rounds: Measured[]): Measured {
  const cpu = rounds.flatMap((round) => (round.cpu === undefined ? [] : [round.cpu]));
  return {
    requestsPerSecond: median(rounds.map((round) => round.requestsPerSecond)), p50: median(rounds.map((round) => round.p50)),
    p99: median(rounds.map((round) => round.p99)), errors: rounds.reduce((sum, round) => sum + round.errors, 0), cpu: cpu.length ? median(cpu) : undefined,
  };
}

/** Two `svc serve` replicas on one PostgreSQL and NATS; undefined (with a line saying why) when either is missing. */
async function startReplicas(): Promise<{ replicas: ServedPlatform[]; database: TestDatabase; nats: TestNats; target: LoadTarget } | undefined> {
  if (!(await postgresAvailable()) || !natsServerAvailable()) {
    console.log('bench/invoke: the two-replica row needs PostgreSQL on 127.0.0.1:5432 and nats-server; skipped');
    return undefined;
  }
  const database = await createDatabase('postgres');
  const nats = await startNats();
  const shared = { ...nats.env, SVC_DATABASE_URL: database.databaseUrl, SVC_SECRETS_KEY: randomBytes(32).toString('base64'), SVC_LOG_LEVEL: 'warn' };
  const first = await servePlatform(shared);
  const second = await servePlatform({ ...shared, SVC_PLACEMENT: 'false', SVC_LOCAL_CLUSTER: 'false' }, { replica: true });
  const { target } = await deployEcho(first.url, await first.credentials(['invoke_function', 'list_functions']));
  const both = { ...target, origin: [target.origin as string, second.url.replace('localhost', '127.0.0.1')] };
  // The second replica learns the instance from the first over NATS.
  while ((await load({ ...both, origin: both.origin[1] }, 1, 0.2)).errors > 0) await sleep(200);
  return { replicas: [first, second], database, nats, target: both };
}

const platform = await servePlatform({
  SVC_LOG_LEVEL: 'warn',
  ...(PROFILE ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${path.resolve(PROFILE)}` } : {}),
});
let nginx: ChildProcess | undefined;
const bareNodes: ChildProcess[] = [];
let replicated: Awaited<ReturnType<typeof startReplicas>>;
try {
  const { target: ours, versionId } = await deployEcho(platform.url, await platform.credentials(['invoke_function', 'list_functions']));
  // The instance's own address is internal; read it where the control plane keeps it.
  const store = new Database(path.join(platform.dataDir, 'svc.db'), { readonly: true });
  const row = store.prepare('select endpoint from instances where version_id = ? and desired = 1').get(versionId) as { endpoint: string };
  store.close();
  const echoPort = (JSON.parse(row.endpoint) as { ports: { inference: number } }).ports.inference;
  const started = await startNginx(echoPort);
  nginx = started.process;
  const bare = await startBareNodeProxy(echoPort, false);
  const contract = await startBareNodeProxy(echoPort, true);
  bareNodes.push(bare.process, contract.process);
  replicated = await startReplicas();

  /** The proxy processes whose CPU per request is measured. */
  const processes: Record<string, number[]> = {
    'bare Node.js proxy': [bare.process.pid!],
    [CONTRACT_ROW]: [contract.process.pid!],
    'svc pexec (gateway)': [platform.process.pid!],
    'svc pexec, 2 replicas on NATS': replicated?.replicas.map((replica) => replica.process.pid!) ?? [],
  };
  const targets: Record<string, LoadTarget> = {
    'direct to the instance': { origin: `http://127.0.0.1:${echoPort}`, path: '/echo', headers: JSON_TYPE, body: BODY },
    'nginx proxy_pass': { origin: `http://127.0.0.1:${started.port}`, path: '/', headers: JSON_TYPE, body: BODY },
    'bare Node.js proxy': { origin: `http://127.0.0.1:${bare.port}`, path: '/echo', headers: JSON_TYPE, body: BODY },
    // The client sends it what it sends svc, the credential included.
    [CONTRACT_ROW]: { ...ours, origin: `http://127.0.0.1:${contract.port}`, path: '/echo' },
    'svc pexec (gateway)': ours,
    ...(replicated ? { 'svc pexec, 2 replicas on NATS': replicated.target } : {}),
  };
  for (const target of Object.values(targets)) await load(target, 8, 1);
  const measure = async (target: LoadTarget, pids: number[], concurrency: number): Promise<Measured> => {
    const before = cpuMicros(pids);
    const result = await load(target, concurrency, SECONDS);
    return { ...result, cpu: pids.length ? (cpuMicros(pids) - before) / (result.requestsPerSecond * SECONDS) : undefined };
  };
  const rows: (string | number)[][] = [];
  const summary: string[] = [];
  for (const concurrency of LEVELS) {
    const rounds: Record<string, Measured[]> = {};
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, target] of Object.entries(targets)) (rounds[name] ??= []).push(await measure(target, processes[name] ?? [], concurrency));
    }
    const results = Object.fromEntries(Object.entries(rounds).map(([name, measured]) => [name, medianOf(measured)]));
    const [svc, nginxRow, bareRow, contractRow, direct] = [results['svc pexec (gateway)'], results['nginx proxy_pass'], results['bare Node.js proxy'], results[CONTRACT_ROW],
      results['direct to the instance']];
    for (const [name, result] of Object.entries(results)) {
      rows.push([`c=${concurrency}  ${name}`, result.requestsPerSecond, result.p50, result.p99, result.requestsPerSecond / nginxRow.requestsPerSecond,
        result.requestsPerSecond / bareRow.requestsPerSecond, result.cpu === undefined ? '' : Math.round(result.cpu), result.errors]);
    }
    // Each round's ratio pairs two rows measured moments apart; their spread says how far to trust the median.
    const perRound = rounds['svc pexec (gateway)'].map((ours, round) => (ours.requestsPerSecond / rounds['bare Node.js proxy'][round].requestsPerSecond).toFixed(2));
    summary.push(`c=${concurrency}: svc ${(svc.requestsPerSecond / bareRow.requestsPerSecond).toFixed(2)}× the bare Node.js proxy (rounds ${perRound.join(', ')}), `
      + `${(svc.requestsPerSecond / nginxRow.requestsPerSecond).toFixed(2)}× nginx; added p50 ${(svc.p50 - direct.p50).toFixed(3)} ms over direct; `
      + `CPU per request ${Math.round(svc.cpu!)} µs vs ${Math.round(bareRow.cpu!)} µs (bare); `
      + `${(svc.requestsPerSecond / contractRow.requestsPerSecond).toFixed(2)}× the bare proxy carrying the same headers`);
  }
  printTable(`bench/invoke: medians of ${ROUNDS} rounds of ${SECONDS} s per row, echo sample, closed-loop clients (node ${process.version})`,
    ['concurrency  path', 'req/s', 'p50 ms', 'p99 ms', '× nginx', '× bare', 'CPU µs/req', 'errors'], rows);
  console.log(summary.join('\n'));
  console.log('targets: c=32 ≥ 0.85× the bare Node.js proxy (≥ 0.8× nginx); added p50 at c=1 ≤ 0.15 ms; c=256 ≥ 0.8× the bare proxy');
} finally {
  nginx?.kill('SIGTERM');
  for (const child of bareNodes) child.kill('SIGTERM');
  for (const replica of replicated?.replicas.reverse() ?? []) await replica.stop();
  await replicated?.database.drop();
  await replicated?.nats.stop();
  await platform.stop();
}
