// bench/invoke/profile.ts: where pexec spends its CPU. Runs svc serve under `node --cpu-prof`, drives
// POST /v2/svc/pexec at BENCH_CONCURRENCY (32) for BENCH_SECONDS (10), then prints the profile of the
// platform's busy time: self time by file and by function, and inclusive time of the hot frames.
// BENCH_NATS=1: the platform on PostgreSQL and NATS JetStream (the queue several replicas share; a
// nats-server of its own, with a user and password).
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import { createDatabase } from '../../api/test/helpers/databases.ts';
import { request } from '../../api/test/helpers/http.ts';
import { startNats } from '../../api/test/helpers/nats.ts';
import { servePlatform } from '../../api/test/helpers/served.ts';
import { load } from '../lib/load.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const TOP = Number(process.env.BENCH_TOP ?? 40);
const BODY = JSON.stringify({ message: 'hello', n: 42 });

interface ProfileNode { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[]; startTime: number; endTime: number }

const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-profile-'));
const database = process.env.BENCH_NATS ? await createDatabase('postgres') : undefined;
const nats = database ? await startNats() : undefined;
const platform = await servePlatform({
  SVC_LOG_LEVEL: 'warn', NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${dir}`,
  ...(database && nats ? { ...nats.env, SVC_DATABASE_URL: database.databaseUrl, SVC_SECRETS_KEY: randomBytes(32).toString('base64') } : {}),
});
let window = { from: 0, to: 0, requests: 1 };
try {
  const { token, apiKey } = await platform.credentials(['invoke_function', 'list_functions']);
  const api = (method: string, url: string, options: Record<string, unknown>) => request(platform.url, method, url, { host: 'api.localhost', ...options });
  const fn = (await api('POST', '/v2/svc/functions', {
    bearer: token,
    body: { name: 'profile-echo', containerImage: 'local/echo:1', containerEnvironment: [{ key: 'ECHO_HEADERS', value: 'false' }], inferenceUrl: '/echo', inferencePort: 8000, health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT5S', expectedStatusCode: 200 } },
  })).body.function;
  await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
    bearer: token, body: { deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 1024 }] },
  });
  while ((await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token })).body.function.status !== 'ACTIVE') await sleep(100);
  const target = {
    origin: `http://127.0.0.1:${platform.port}`, path: `/v2/svc/pexec/functions/${fn.id}`, body: BODY,
    headers: { 'content-type': 'application/json', host: 'api.localhost', authorization: `Bearer ${apiKey}` },
  };
  await load(target, 8, 2);
  const from = performance.now();
  const result = await load(target, CONCURRENCY, SECONDS);
  window = { from, to: performance.now(), requests: result.requestsPerSecond * SECONDS };
  console.log(`c=${CONCURRENCY}: ${Math.round(result.requestsPerSecond)} req/s, p50 ${result.p50.toFixed(2)} ms, ${result.errors} errors`);
} finally {
  await platform.stop();
  await database?.drop();
  await nats?.stop();
}
// The profile ends when the platform exits: count back from there to the load's window (µs).
const stoppedAt = performance.now();

// The main thread's profile of the process that served (thread 0, the last written: the process re-executes
// itself once with its heap cap, and the watchdog's thread writes one of its own).
const file = readdirSync(dir).filter((name) => /\.0\.\d+\.cpuprofile$/.test(name)).sort().at(-1);
if (!file) throw new Error(`no profile written in ${dir}`);
const profile = JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const parent = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
const label = (node: ProfileNode) => {
  const { functionName, url, lineNumber } = node.callFrame;
  const where = url.replace(/^.*node_modules\//, '').replace(/^.*\/api\/src\//, 'src/');
  return `${functionName || '(anonymous)'} ${where}${where ? `:${lineNumber + 1}` : ''}`;
};
const fileOf = (node: ProfileNode) => node.callFrame.url.replace(/^.*node_modules\/((@[^/]+\/)?[^/]+).*$/, '$1').replace(/^.*\/api\/src\//, 'src/') || node.callFrame.functionName;
// Only the samples taken while the load ran (profile times are µs since the profile began).
const selfByFunction = new Map<string, number>();
const selfByFile = new Map<string, number>();
const inclusive = new Map<string, number>();
const loadFrom = profile.endTime - (stoppedAt - window.from) * 1000;
const loadTo = profile.endTime - (stoppedAt - window.to) * 1000;
let at = profile.startTime;
let busy = 0;
for (let i = 0; i < profile.samples.length; i++) {
  at += profile.timeDeltas[i];
  if (at < loadFrom || at > loadTo) continue;
  const node = byId.get(profile.samples[i])!;
  const delta = profile.timeDeltas[i + 1] ?? 0;
  if (node.callFrame.functionName === '(idle)') continue;
  busy += delta;
  selfByFunction.set(label(node), (selfByFunction.get(label(node)) ?? 0) + delta);
  selfByFile.set(fileOf(node), (selfByFile.get(fileOf(node)) ?? 0) + delta);
  const seen = new Set<string>();
  for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
    const name = label(byId.get(id)!);
    if (!seen.has(name)) inclusive.set(name, (inclusive.get(name) ?? 0) + delta);
    seen.add(name);
  }
}
const { requests } = window;
console.log(`busy ${(busy / 1000).toFixed(0)} ms over the run: ${(busy / requests).toFixed(1)} µs of platform CPU per request`);
const show = (title: string, table: Map<string, number>) => {
  console.log(`\n${title}`);
  for (const [name, micros] of [...table].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
    console.log(`${(100 * micros / busy).toFixed(1).padStart(5)}%  ${(micros / requests).toFixed(2).padStart(6)} µs  ${name}`);
  }
};
show('self time by file', selfByFile);
show('self time by function', selfByFunction);
show('inclusive time', inclusive);
