// bench/proxy: the streaming proxy (proxy/) next to HAProxy configured like the reference intermediary
// (Debian's /usr/sbin/haproxy), both in front of the same TLS WebSocket echo upstream, each its own
// process; this process is the load generator. Figures:
//   open      new WebSocket → first message (the upstream's greeting), sequential, median; once with
//             one token throughout (reconnects), once with a new token per open (first connections)
//   RTT       64-byte messages echoed one at a time on one connection, p50 / p99
//   msgs/s    64-byte messages with 64 in flight on one connection
//   CPU       the proxy process's CPU time per 1,000 relayed messages during the msgs/s phase
//   memory    RSS growth of the proxy process per idle connection, at 1,000 open connections
// Targets: open ≤ 1.0× HAProxy, p99 ≤ 1.25× HAProxy, msgs/s ≥ 1.0× HAProxy, ≤ 64 KiB per idle connection.
// Our proxy runs as deployed: user tokens verified (JWT against a JWKS served here), TLS verified.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import selfsigned from 'selfsigned';
import WebSocket from 'ws';
import { freePort } from '../../api/test/helpers/wait.ts';
import { median, percentile, printTable } from '../lib/report.ts';

const OPENS = Number(process.env.BENCH_OPENS ?? 200);
const PINGS = Number(process.env.BENCH_PINGS ?? 5_000);
const THROUGHPUT_SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const IN_FLIGHT = 64;
const IDLE_CONNECTIONS = Number(process.env.BENCH_IDLE ?? 1_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const HAPROXY = process.env.BENCH_HAPROXY ?? '/usr/sbin/haproxy';

const API_KEY = 'svcapikey-bench-0123456789abcdef';
const FUNCTION_ID = '5d3a1f0e-0000-4000-8000-00000000be0c';
const PLATFORM_HOST = 'api.localhost';
const ISSUER = 'https://id.bench.example';
const AUDIENCE = 'svc-streaming-proxy';
const PAYLOAD = Buffer.alloc(64, 0x62);
const root = path.resolve(import.meta.dirname, '../..');
const work = mkdtempSync(path.join(os.tmpdir(), 'bench-proxy-'));

interface Subject {
  name: string;
  /** WebSocket URL without the token. */
  base: string;
  url: string;
  process: ChildProcess;
}

async function main(): Promise<void> {
  const children: ChildProcess[] = [];
  const jwks = await serveJwks();
  try {
    const pki = await makePki();
    const upstream = spawnLogged('upstream', process.execPath, [path.join(import.meta.dirname, 'upstream.ts')], { BENCH_UPSTREAM_CERT: pki.certFile, BENCH_UPSTREAM_KEY: pki.keyFile });
    children.push(upstream.child);
    const upstreamPort = Number((await upstream.waitFor(/listening (\d+)/))[1]);

    const oursPort = await freePort();
    const ours = spawnLogged('proxy', process.execPath, [path.join(root, 'proxy/src/main.ts')], {
      SVC_API_KEY: API_KEY,
      STREAMING_FUNCTION_ID: FUNCTION_ID,
      SVC_SERVER: `https://127.0.0.1:${upstreamPort}`,
      SVC_SERVER_HOST: PLATFORM_HOST,
      SVC_CA_FILE: pki.caFile,
      PROXY_PORT: String(oursPort),
      PROXY_HOST: '127.0.0.1',
      ...(process.env.BENCH_PROXY_AUTH === 'off'
        ? { PROXY_AUTH_DISABLED: 'true' }
        : { PROXY_AUTH_JWKS_URL: jwks.url, PROXY_AUTH_ISSUER: ISSUER, PROXY_AUTH_AUDIENCE: AUDIENCE }),
      PROXY_LOG_LEVEL: process.env.BENCH_PROXY_LOG_LEVEL ?? 'info',
    });
    children.push(ours.child);
    await waitForPort(oursPort, ours);

    const haproxyPort = await freePort();
    const config = path.join(work, 'haproxy.cfg');
    writeFileSync(config, haproxyConfig(haproxyPort, upstreamPort, pki.caFile));
    const haproxy = spawnLogged('haproxy', HAPROXY, ['-f', config, '-db'], {});
    children.push(haproxy.child);
    await waitForPort(haproxyPort, haproxy);

    const query = `?access_token=${await jwks.token()}`;
    const subjects: Subject[] = [
      { name: 'proxy (ours)', base: `ws://127.0.0.1:${oursPort}/ours`, url: `ws://127.0.0.1:${oursPort}/ours${query}`, process: ours.child },
      { name: 'haproxy', base: `ws://127.0.0.1:${haproxyPort}/haproxy`, url: `ws://127.0.0.1:${haproxyPort}/haproxy${query}`, process: haproxy.child },
    ];

    for (const subject of subjects) {
      await openTimes(subject.url, 50);
      await roundTrips(subject.url, 1_000);
      await throughput(subject.url, 1);
    }

    const results = new Map(subjects.map((subject) => [subject.name, { open: [] as number[], fresh: [] as number[], p50: [] as number[], p99: [] as number[], rate: [] as number[], cpu: [] as number[] }]));
    for (let round = 0; round < ROUNDS; round++) {
      // A browser's first connection brings a token the proxy has not verified yet.
      const freshTokens = await Promise.all(Array.from({ length: OPENS }, () => jwks.token()));
      // Alternate who goes first, so drift (heat, caches) does not favour one side.
      for (const subject of round % 2 === 0 ? subjects : [...subjects].reverse()) {
        const result = results.get(subject.name)!;
        result.open.push(median(await openTimes(subject.url, OPENS)));
        result.fresh.push(median(await openTimes(freshTokens.map((token) => `${subject.base}?access_token=${token}`), OPENS)));
        const rtts = (await roundTrips(subject.url, PINGS)).sort((a, b) => a - b);
        result.p50.push(percentile(rtts, 50));
        result.p99.push(percentile(rtts, 99));
        const cpuBefore = cpuMs(subject.process.pid!);
        const { rate, messages } = await throughput(subject.url, THROUGHPUT_SECONDS);
        result.rate.push(rate);
        result.cpu.push((cpuMs(subject.process.pid!) - cpuBefore) / (messages / 1_000));
      }
    }
    const memory = new Map<string, number>();
    for (const subject of subjects) memory.set(subject.name, await idleMemory(subject));

    const [mine, theirs] = subjects.map((subject) => {
      const result = results.get(subject.name)!;
      return { open: median(result.open), fresh: median(result.fresh), p50: median(result.p50), p99: median(result.p99), rate: median(result.rate), cpu: median(result.cpu), kib: memory.get(subject.name)! };
    });
    printTable(
      `bench/proxy: ${ROUNDS} rounds (medians); ${OPENS} opens, ${PINGS} sequential 64 B echoes, ${THROUGHPUT_SECONDS} s at ${IN_FLIGHT} in flight, ${IDLE_CONNECTIONS} idle connections (node ${process.version}, ${os.cpus().length} cores)`,
      ['metric', 'proxy (ours)', 'haproxy', 'ratio', 'target', 'met'],
      [
        ['open → first message, ms', mine.open, theirs.open, mine.open / theirs.open, '≤ 1.00×', verdict(mine.open / theirs.open <= 1)],
        ['  same, new token each open', mine.fresh, theirs.fresh, mine.fresh / theirs.fresh, '', ''],
        ['relay RTT p50, ms', mine.p50, theirs.p50, mine.p50 / theirs.p50, '', ''],
        ['relay RTT p99, ms', mine.p99, theirs.p99, mine.p99 / theirs.p99, '≤ 1.25×', verdict(mine.p99 / theirs.p99 <= 1.25)],
        ['msgs/s, 64 in flight', mine.rate, theirs.rate, mine.rate / theirs.rate, '≥ 1.00×', verdict(mine.rate / theirs.rate >= 1)],
        ['  proxy CPU ms per 1,000 msgs', mine.cpu, theirs.cpu, mine.cpu / theirs.cpu, '', ''],
        ['KiB per idle connection', mine.kib, theirs.kib, mine.kib / theirs.kib, '≤ 64 KiB', verdict(mine.kib <= 64)],
      ],
    );
    const stats = await upstreamStats(upstreamPort, pki.caFile);
    const share = (key: string) => stats[key] ? `${stats[key].resumed}/${stats[key].total}` : '-';
    console.log(`upstream TLS sessions resumed (upgrades): proxy (ours) ${share('/ours')}, haproxy ${share('/haproxy')}`);
  } finally {
    for (const child of children) child.kill('SIGTERM');
    await Promise.all(children.map((child) => child.exitCode === null ? once(child, 'exit') : undefined));
    await jwks.close();
    rmSync(work, { recursive: true, force: true });
  }
}

function verdict(met: boolean): string {
  return met ? 'yes' : 'NO';
}

/** The reference HAProxy intermediary (NVIDIA/nvcf docs/user/streaming-functions.md), adapted to 2.6 and this bench. */
function haproxyConfig(port: number, upstreamPort: number, caFile: string): string {
  return `global
    log stdout format raw local0 info
    ssl-server-verify required

defaults
    log     global
    option  httplog
    option  dontlognull
    option  logasap
    timeout connect 5000
    timeout client  50000
    timeout server  50000

frontend streaming
    bind 127.0.0.1:${port}
    mode http
    timeout client       7s
    timeout http-request 30m
    use_backend platform

backend platform
    mode http
    timeout connect 4s
    timeout server  7s
    # Not in the reference sample: without it an idle WebSocket ends after the 7 s client/server timeouts.
    timeout tunnel  1h
    http-request set-header Host ${PLATFORM_HOST}
    http-request set-header Authorization "Bearer ${API_KEY}"
    http-request set-header svc-function-id ${FUNCTION_ID}
    http-response set-header access-control-expose-headers *
    http-response set-header access-control-allow-headers *
    http-response set-header access-control-allow-origin *
    server platform 127.0.0.1:${upstreamPort} ssl ca-file ${caFile} verify required verifyhost ${PLATFORM_HOST} sni str(${PLATFORM_HOST})
`;
}

function connect(url: string): Promise<{ ws: WebSocket; openedMs: number }> {
  const started = performance.now();
  const ws = new WebSocket(url, { perMessageDeflate: false });
  return new Promise((resolve, reject) => {
    ws.once('message', () => resolve({ ws, openedMs: performance.now() - started }));
    ws.once('error', reject);
    ws.once('unexpected-response', (_request, response) => reject(new Error(`${url}: HTTP ${response.statusCode}`)));
  });
}

async function closeAndWait(ws: WebSocket): Promise<void> {
  if (ws.readyState === WebSocket.CLOSED) return;
  const done = once(ws, 'close');
  ws.close();
  await done;
}

async function openTimes(url: string | string[], count: number): Promise<number[]> {
  const times: number[] = [];
  for (let index = 0; index < count; index++) {
    const { ws, openedMs } = await connect(Array.isArray(url) ? url[index] : url);
    times.push(openedMs);
    await closeAndWait(ws);
  }
  return times;
}

async function roundTrips(url: string, count: number): Promise<number[]> {
  const { ws } = await connect(url);
  const times: number[] = [];
  for (let index = 0; index < count; index++) {
    const started = performance.now();
    const echoed = once(ws, 'message');
    ws.send(PAYLOAD);
    await echoed;
    times.push(performance.now() - started);
  }
  await closeAndWait(ws);
  return times;
}

async function throughput(url: string, seconds: number): Promise<{ rate: number; messages: number }> {
  const { ws } = await connect(url);
  let received = 0;
  let sent = 0;
  const started = performance.now();
  const deadline = started + seconds * 1_000;
  const finished = new Promise<number>((resolve) => {
    ws.on('message', () => {
      received++;
      if (performance.now() < deadline) {
        ws.send(PAYLOAD);
        sent++;
      } else if (received === sent) {
        resolve(received / ((performance.now() - started) / 1_000));
      }
    });
  });
  for (; sent < IN_FLIGHT; sent++) ws.send(PAYLOAD);
  const rate = await finished;
  ws.removeAllListeners('message');
  await closeAndWait(ws);
  return { rate, messages: received };
}

async function upstreamStats(port: number, caFile: string): Promise<Record<string, { total: number; resumed: number }>> {
  const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
    https.get({ host: '127.0.0.1', port, path: '/stats', servername: PLATFORM_HOST, ca: readFileSync(caFile), agent: false }, resolve).once('error', reject);
  });
  let body = '';
  for await (const chunk of response) body += String(chunk);
  return JSON.parse(body) as Record<string, { total: number; resumed: number }>;
}

/** User + system CPU time of a process, from /proc (clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

function rssKiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? Number.NaN);
}

async function idleMemory(subject: Subject): Promise<number> {
  const pid = subject.process.pid!;
  await sleep(1_000);
  const before = rssKiB(pid);
  const sockets: WebSocket[] = [];
  const batch = 50;
  for (let index = 0; index < IDLE_CONNECTIONS; index += batch) {
    const opened = await Promise.all(Array.from({ length: Math.min(batch, IDLE_CONNECTIONS - index) }, () => connect(subject.url)));
    sockets.push(...opened.map((each) => each.ws));
  }
  // Let allocations settle (and our proxy's first keepalive sweep pass) before reading.
  await sleep(3_000);
  const alive = sockets.filter((ws) => ws.readyState === WebSocket.OPEN).length;
  const after = rssKiB(pid);
  if (alive !== IDLE_CONNECTIONS) throw new Error(`${subject.name}: only ${alive} of ${IDLE_CONNECTIONS} idle connections survived`);
  await Promise.all(sockets.map(closeAndWait));
  return (after - before) / IDLE_CONNECTIONS;
}

async function makePki(): Promise<{ caFile: string; certFile: string; keyFile: string }> {
  const ca = await selfsigned.generate([{ name: 'commonName', value: 'bench CA' }], {
    keyType: 'ec', algorithm: 'sha256',
    extensions: [{ name: 'basicConstraints', cA: true, critical: true }, { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true }],
  });
  const leaf = await selfsigned.generate([{ name: 'commonName', value: PLATFORM_HOST }], {
    keyType: 'ec', algorithm: 'sha256', ca: { cert: ca.cert, key: ca.private },
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [{ type: 2, value: PLATFORM_HOST }, { type: 7, ip: '127.0.0.1' }] },
    ],
  });
  const files = { caFile: path.join(work, 'ca.pem'), certFile: path.join(work, 'upstream.pem'), keyFile: path.join(work, 'upstream.key') };
  writeFileSync(files.caFile, ca.cert);
  writeFileSync(files.certFile, leaf.cert);
  writeFileSync(files.keyFile, leaf.private);
  return files;
}

async function serveJwks(): Promise<{ url: string; token(): Promise<string>; close(): Promise<void> }> {
  const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true });
  const body = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'bench', alg: 'ES256', use: 'sig' }] });
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`,
    token: () => new SignJWT({ sub: 'bench', svc_functions: [FUNCTION_ID], jti: randomUUID() })
      .setProtectedHeader({ alg: 'ES256', kid: 'bench' }).setIssuer(ISSUER).setAudience(AUDIENCE).setIssuedAt().setExpirationTime('1h')
      .sign(privateKey),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** A child process whose output goes to a file (a pipe read by this busy process would slow it). */
function spawnLogged(name: string, command: string, args: string[], env: Record<string, string>) {
  const logFile = path.join(work, `${name}.log`);
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', openSync(logFile, 'w'), openSync(logFile, 'a')] });
  return {
    child,
    async waitFor(pattern: RegExp): Promise<RegExpExecArray> {
      for (;;) {
        if (child.exitCode !== null) throw new Error(`${name} exited: ${readFileSync(logFile, 'utf8')}`);
        const match = pattern.exec(readFileSync(logFile, 'utf8'));
        if (match) return match;
        await sleep(50);
      }
    },
  };
}

async function waitForPort(port: number, owner: { child: ChildProcess; waitFor(pattern: RegExp): Promise<unknown> }): Promise<void> {
  for (;;) {
    if (owner.child.exitCode !== null) await owner.waitFor(/$^/);
    const connected = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => { socket.destroy(); resolve(true); });
      socket.once('error', () => resolve(false));
    });
    if (connected) return;
    await sleep(50);
  }
}

await main();
