// bench/auth: requests/s of an authenticated no-op route (GET /v2/svc/whoami: bearer verified, scopes
// checked) next to an unauthenticated one (GET /admin/health/liveness) on the same platform process, in
// the same run, interleaved. Target: authenticated ≥ 0.8× unauthenticated.
import autocannon from 'autocannon';
import { printTable, median } from '../lib/report.ts';
import { servePlatform } from '../../api/test/helpers/served.ts';

const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);
const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);

async function load(url: string, headers: Record<string, string>, duration: number) {
  const result = await autocannon({ url, connections, duration, headers });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 };
}

const platform = await servePlatform({ SVC_LOG_LEVEL: 'info' });
try {
  const { apiKey } = await platform.credentials(['list_functions']);
  const routes = {
    'unauthenticated  GET /admin/health/liveness': { url: `${platform.url}/admin/health/liveness`, headers: {} },
    'authenticated    GET /v2/svc/whoami': { url: `${platform.url}/v2/svc/whoami`, headers: { authorization: `Bearer ${apiKey}` } },
  };
  for (const route of Object.values(routes)) await load(route.url, route.headers, 2);
  const samples = new Map<string, { rps: number; p50: number; p99: number }[]>();
  for (let round = 0; round < rounds; round++) {
    for (const [name, route] of Object.entries(routes)) {
      samples.set(name, [...(samples.get(name) ?? []), await load(route.url, route.headers, seconds)]);
    }
  }
  const [open, authed] = [...samples.values()].map((runs) => ({
    rps: median(runs.map((run) => run.rps)), p50: median(runs.map((run) => run.p50)), p99: median(runs.map((run) => run.p99)),
  }));
  printTable(`bench/auth: ${connections} connections, ${rounds}×${seconds} s per route, medians (node ${process.version})`,
    ['route', 'req/s', 'p50 ms', 'p99 ms', 'ratio'], [
      [Object.keys(routes)[0], open.rps, open.p50, open.p99, 1],
      [Object.keys(routes)[1], authed.rps, authed.p50, authed.p99, authed.rps / open.rps],
    ]);
  console.log(`target: authenticated/unauthenticated req/s ≥ 0.80 → ${(authed.rps / open.rps).toFixed(2)}`);
} finally {
  await platform.stop();
}
