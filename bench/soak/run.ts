// bench/soak: a bounded long run of `svc serve` (SQLite, its own process) under a mix of work, reporting
// its resident memory, heap and event-loop delay over time, and whether they stay flat.
//
//   node bench/soak/run.ts [--minutes 10] [--interval 30] [--clients 4] [--think-ms 10]
//
// All at once, for the whole run:
// - invocation: `clients` closed-loop clients (each waits think-ms between requests) on an echo function of
//   account A (2 instances, concurrency 8);
// - deployments from two accounts: every 15 s account A or B (in turn) deploys a new echo function
//   (minInstances 1), sends it a request, and undeploys and deletes its oldest beyond two. The local
//   cluster offers 6 slots and B may hold 2 instances (maxInstancesAllowed), so churn meets a full cluster
//   with requests waiting, and a full quota: the conditions of issue 15's runaway;
// - streaming sessions (needs ffmpeg): one after another, WebSocket → hello → config → 2 s → bye, each on a
//   fresh instance of the reference streaming container; a 503 while its replacement starts is retried;
// - kill -9 of instances: every 20 s one running echo instance process gets SIGKILL; the agent restarts it.
// Every `interval` seconds one row: RSS of the platform process (/proc), V8 heap used, event-loop delay
// p99 and max over the interval (prom-client's monitorEventLoopDelay, reset at each scrape of /metrics),
// requests answered and failed, sessions, deployments (and refusals), versions not fully placed, kills,
// placement rounds.
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { WebSocket } from 'ws';
import { ADMIN_ISSUER, loadAdminKey, signJwt } from '../../api/src/control/keys/signing.ts';
import { tempDir } from '../../api/test/helpers/databases.ts';
import { request } from '../../api/test/helpers/http.ts';
import { descendantsOf } from '../../api/test/helpers/processes.ts';
import { servePlatform } from '../../api/test/helpers/served.ts';
import { which } from '../../streaming-app/test/helpers.ts';
import { median, printTable } from '../lib/report.ts';

const { values: args } = parseArgs({
  options: {
    minutes: { type: 'string', default: '10' },
    interval: { type: 'string', default: '30' },
    clients: { type: 'string', default: '4' },
    'think-ms': { type: 'string', default: '10' },
  },
});
const MINUTES = Number(args.minutes);
const INTERVAL_S = Number(args.interval);
const CLIENTS = Number(args.clients);
const THINK_MS = Number(args['think-ms']);
const CHURN_EVERY_MS = 15_000;
const KILL_EVERY_MS = 20_000;

const hasFfmpeg = Boolean(which('ffmpeg'));
if (!hasFfmpeg) console.log('# no ffmpeg: the run has no streaming sessions (Debian package ffmpeg)');

const dataDir = tempDir('svc-bench-soak-');
const configFile = path.join(dataDir, 'config.yaml');
writeFileSync(configFile, 'compute:\n  localCluster:\n    gpus:\n      - name: LOCAL\n        capacity: 6\n        instanceTypes:\n          - { name: LOCAL.CPU_1x, default: true }\n');
const served = await servePlatform({ SVC_CONFIG: configFile, SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: 'warn', SVC_TURN_SERVER: 'none', NODE_NO_WARNINGS: '1' });
const api = (method: string, target: string, options: { bearer?: string; body?: unknown; headers?: Record<string, string> } = {}) =>
  request(served.url, method, target, { host: 'api.localhost', ...options });
const gpuSpec = (min: number, max: number, concurrency = 1) => ({ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: min, maxInstances: max, maxRequestConcurrency: concurrency });
const echo = (name: string) => ({
  name, inferenceUrl: '/echo', inferencePort: 8000, containerImage: 'local/echo:1',
  health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 },
});

// Interrupted: the platform (its own process) goes too.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void served.stop().finally(() => process.exit(130)));

const counts = { ok: 0, failed: 0, sessions: 0, sessionsFailed: 0, deployed: 0, refused: 0, killed: 0 };
let running = true;

try {
  const adminKey = await loadAdminKey(path.join(dataDir, 'admin-signing-key.pem'), { create: false });
  const admin = await signJwt(adminKey, { iss: ADMIN_ISSUER, aud: 'svc-api', sub: 'soak' }, new Date(Date.now() + 86_400_000));
  await api('POST', '/v2/svc/accounts/soak-b', { bearer: admin, body: { maxInstancesAllowed: 2 } });
  const tokenFor = async (ncaId?: string) => (await request(served.url, 'POST', '/v1/admin/keys', {
    host: 'api-keys.localhost', bearer: admin, body: ncaId ? { ncaId } : {},
  })).body.value as string;
  const tokens = { a: await tokenFor(), b: await tokenFor('soak-b') };
  const keyFor = async (token: string) => (await request(served.url, 'POST', '/v1/keys', {
    host: 'api-keys.localhost', bearer: token, headers: { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'soak' },
    body: { expires_at: new Date(Date.now() + 86_400_000).toISOString(), authorizations: { policies: [{ scopes: ['invoke_function', 'list_functions'] }] } },
  })).body.value as string;
  const accounts = { a: { token: tokens.a, key: await keyFor(tokens.a) }, b: { token: tokens.b, key: await keyFor(tokens.b) } };
  const key = accounts.a.key;

  const invoked = await deploy(tokens.a, echo('soak-invoke'), gpuSpec(2, 2, 8));
  const streaming = hasFfmpeg ? await deploy(tokens.a, {
    name: 'soak-stream', containerImage: 'local/streaming-app:1', functionType: 'STREAMING', inferenceUrl: '/sign_in', inferencePort: 49100,
    health: { protocol: 'HTTP', uri: '/v1/streaming/ready', port: 8011, timeout: 'PT10S', expectedStatusCode: 200 },
    containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '320x180' }, { key: 'STREAMING_VIDEO_FPS', value: '30' }],
  }, gpuSpec(1, 1)) : undefined;
  console.log('# waiting for the invoked and the streaming function to be ACTIVE');
  await waitActive(invoked, key);
  if (streaming) await waitActive(streaming, key);
  console.log(`# running the mix for ${MINUTES} min`);

  const started = Date.now();
  const deadline = started + MINUTES * 60_000;
  // A worker that fails ends the run (and says so) rather than leaving the platform behind.
  const workers = [
    ...Array.from({ length: CLIENTS }, () => invoke(invoked.id, key)),
    churn(accounts),
    killInstances(),
    ...(streaming ? [sessions(streaming.id, key)] : []),
  ].map((work) => work.catch((error: Error) => {
    console.log(`# a worker failed, ending the run: ${error.stack}`);
    running = false;
  }));

  const rows: (string | number)[][] = [];
  const samples: { minute: number; rssMb: number; p99: number }[] = [];
  let rounds = (await scrape()).rounds; // also resets the event-loop histogram: each row covers its own interval
  let previous = { ...counts };
  while (running && Date.now() < deadline) {
    await sleep(Math.min(INTERVAL_S * 1000, deadline - Date.now()));
    const metrics = await scrape();
    const rssMb = residentMb(served.process.pid!);
    const minute = (Date.now() - started) / 60_000;
    const delta = (name: keyof typeof counts) => String(counts[name] - previous[name]);
    const unplaced = await unplacedVersions(Object.values(accounts).map((account) => account.token));
    samples.push({ minute, rssMb, p99: metrics.loopP99Ms });
    rows.push([minute.toFixed(1), rssMb, metrics.heapMb, metrics.loopP99Ms, metrics.loopMaxMs, delta('ok'), delta('failed'),
      `${delta('sessions')}/${delta('sessionsFailed')}`, `${delta('deployed')}/${delta('refused')}`, String(unplaced), delta('killed'), String(metrics.rounds - rounds)]);
    previous = { ...counts };
    rounds = metrics.rounds;
    console.log(`# ${minute.toFixed(1)} min: RSS ${rssMb.toFixed(0)} MB, loop p99 ${metrics.loopP99Ms.toFixed(1)} ms`);
  }
  running = false;
  await Promise.race([Promise.all(workers), sleep(15_000)]);

  printTable(`svc serve under a mixed soak of ${MINUTES} min (SQLite; ${CLIENTS} invoking clients, ${THINK_MS} ms think time; load ${os.loadavg().map((load) => load.toFixed(1)).join(' ')})`,
    ['minute', 'RSS MB', 'heap MB', 'loop p99 ms', 'loop max ms', 'requests ok', 'failed', 'sessions ok/failed', 'deploys ok/refused', 'not placed', 'kill -9', 'placement rounds'], rows);
  console.log(verdict(samples));
} finally {
  running = false;
  await served.stop();
}

async function deploy(token: string, body: Record<string, unknown>, spec: Record<string, unknown>) {
  const fn = (await api('POST', '/v2/svc/functions', { bearer: token, body })).body.function;
  const deployed = await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token, body: { deploymentSpecifications: [spec] } });
  return { id: fn.id as string, versionId: fn.versionId as string, status: deployed.status };
}

async function waitActive(fn: { id: string; versionId: string }, key: string) {
  while ((await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: key })).body.function.status !== 'ACTIVE') await sleep(200);
}

/** A closed-loop client on the invoked function. Failures include requests an instance had when killed. */
async function invoke(functionId: string, apiKey: string) {
  const url = new URL(served.url);
  const pool = new Pool(url.origin, { connections: 1 });
  const headers = { host: `api.localhost:${url.port}`, authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'svc-poll-seconds': '5' };
  while (running) {
    try {
      const response = await pool.request({ path: `/v2/svc/pexec/functions/${functionId}`, method: 'POST', headers, body: '{"soak":true}' });
      await response.body.dump();
      if (response.statusCode === 200) counts.ok++;
      else counts.failed++;
    } catch {
      counts.failed++;
    }
    if (THINK_MS) await sleep(THINK_MS);
  }
  await pool.close();
}

/**
 * Every CHURN_EVERY_MS one account (in turn) deploys a new function, sends it one request (which waits
 * when the function cannot be placed: the runaway's condition), and retires its oldest beyond two. B's
 * quota (2) refuses its third; it then retires its oldest so the next one fits.
 */
async function churn(accounts: Record<'a' | 'b', { token: string; key: string }>) {
  const mine: Record<'a' | 'b', { id: string; versionId: string }[]> = { a: [], b: [] };
  const retire = async (account: 'a' | 'b') => {
    const old = mine[account].shift();
    if (!old) return;
    await api('DELETE', `/v2/svc/deployments/functions/${old.id}/versions/${old.versionId}`, { bearer: accounts[account].token });
    await api('DELETE', `/v2/svc/functions/${old.id}/versions/${old.versionId}`, { bearer: accounts[account].token });
  };
  for (let round = 0; running; round++) {
    await sleep(CHURN_EVERY_MS);
    const account = round % 2 === 0 ? 'a' : 'b';
    const { token, key } = accounts[account];
    const fn = await deploy(token, echo(`soak-${account}-${round}`), gpuSpec(1, 1));
    if (fn.status === 200) {
      counts.deployed++;
      mine[account].push(fn);
      void api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, headers: { 'svc-poll-seconds': '1' }, body: {} });
    } else {
      counts.refused++;
      await api('DELETE', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token });
      await retire(account);
    }
    while (mine[account].length > 2) await retire(account);
  }
}

/** Deployed versions placement cannot give all their instances now (they carry healthInfo). */
async function unplacedVersions(tokens: string[]): Promise<number> {
  let count = 0;
  for (const token of tokens) count += (await api('GET', '/v2/svc/functions', { bearer: token })).body.functions.filter((fn: { healthInfo?: unknown[] }) => fn.healthInfo).length;
  return count;
}

/** Every KILL_EVERY_MS a running echo instance of the platform gets SIGKILL. */
async function killInstances() {
  while (running) {
    await sleep(KILL_EVERY_MS);
    const victims = descendantsOf(served.process.pid!).filter((proc) => proc.args.some((arg) => arg.endsWith('echo.ts')));
    const victim = victims[Math.floor(Math.random() * victims.length)]?.pid;
    if (victim === undefined) continue;
    try {
      process.kill(victim, 'SIGKILL');
      counts.killed++;
    } catch {
      // gone meanwhile
    }
  }
}

/** Streaming sessions one after another; each ends with bye, and the next waits for the fresh instance. */
async function sessions(functionId: string, apiKey: string) {
  const url = new URL(served.url);
  while (running) {
    const ended = await new Promise<'ok' | 'busy' | 'failed'>((resolve) => {
      const ws = new WebSocket(`ws://127.0.0.1:${url.port}/sign_in`, { headers: { host: `api.localhost:${url.port}`, authorization: `Bearer ${apiKey}`, 'svc-function-id': functionId } });
      const timer = setTimeout(() => { ws.terminate(); resolve('failed'); }, 30_000);
      const done = (outcome: 'ok' | 'busy' | 'failed') => { clearTimeout(timer); resolve(outcome); };
      ws.once('unexpected-response', (_req, response) => { response.resume(); done(response.statusCode === 503 ? 'busy' : 'failed'); });
      ws.once('error', () => done('failed'));
      ws.once('open', () => ws.send(JSON.stringify({ type: 'hello', protocol: 1 })));
      ws.on('message', (data) => {
        const message = JSON.parse(data.toString());
        if (message.type === 'config') setTimeout(() => ws.send(JSON.stringify({ type: 'bye' })), 2000);
        if (message.type === 'bye') {
          ws.close();
          done('ok');
        }
      });
    });
    if (ended === 'ok') counts.sessions++;
    if (ended === 'failed') counts.sessionsFailed++;
    await sleep(ended === 'ok' ? 100 : 1000);
  }
}

async function scrape() {
  const text = (await api('GET', '/metrics')).text;
  const value = (name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? ([\\d.e+-]+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
  return {
    heapMb: value('nodejs_heap_size_used_bytes') / 1048576,
    loopP99Ms: value('nodejs_eventloop_lag_p99_seconds') * 1000,
    loopMaxMs: value('nodejs_eventloop_lag_max_seconds') * 1000,
    rounds: value('svc_placement_rounds_total'),
  };
}

function residentMb(pid: number): number {
  const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  return kb / 1024;
}

/**
 * Flat means: after the first fifth of the run (warm-up), resident memory grows by less than 1 MB a
 * minute (least-squares slope) and the last third's event-loop p99 is within 2x (+5 ms) of the middle's.
 */
function verdict(points: { minute: number; rssMb: number; p99: number }[]): string {
  const settled = points.filter((point) => point.minute >= MINUTES / 5);
  if (settled.length < 3) return 'too few samples for a verdict (run longer or sample more often)';
  const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
  const mx = mean(settled.map((point) => point.minute));
  const my = mean(settled.map((point) => point.rssMb));
  const slope = settled.reduce((sum, point) => sum + (point.minute - mx) * (point.rssMb - my), 0)
    / settled.reduce((sum, point) => sum + (point.minute - mx) ** 2, 0);
  const third = Math.max(1, Math.floor(settled.length / 3));
  const middle = median(settled.slice(0, settled.length - third).map((point) => point.p99));
  const last = median(settled.slice(-third).map((point) => point.p99));
  const rssFlat = slope < 1;
  const loopFlat = last <= 2 * middle + 5;
  return [
    `RSS after warm-up: ${settled[0].rssMb.toFixed(0)} → ${settled.at(-1)!.rssMb.toFixed(0)} MB, slope ${slope.toFixed(2)} MB/min: ${rssFlat ? 'flat' : 'GROWING'}`,
    `event-loop p99: median ${middle.toFixed(1)} ms before the last third, ${last.toFixed(1)} ms in it: ${loopFlat ? 'flat' : 'GROWING'}`,
  ].join('\n');
}
