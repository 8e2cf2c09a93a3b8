// bench/ratelimit: what a rate limit costs the hot path. POST /v2/svc/pexec to two echo functions side by
// side, one without a rate limit and one with a limit it never reaches (every request checked, none
// refused), in rounds (medians reported): in one process (windows in memory) and, with PostgreSQL and
// nats-server, through two API replicas (windows in NATS KV) behind a round-robin client.
// The owners' numbers (control/stats) are counted on both sides alike: the unlimited row is today's path.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { createDatabase, postgresAvailable } from '../../api/test/helpers/databases.ts';
import { request } from '../../api/test/helpers/http.ts';
import { natsServerAvailable, startNats } from '../../api/test/helpers/nats.ts';
import { servePlatform, type ServedPlatform } from '../../api/test/helpers/served.ts';
import { load, type LoadResult, type LoadTarget } from '../lib/load.ts';
import { median, printTable } from '../lib/report.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const BODY = JSON.stringify({ message: 'hello', n: 42 });

/** An echo function deployed through `url`, with `rateLimit` when given; its pexec target. */
async function deployEcho(url: string, credentials: { token: string; apiKey: string }, name: string, rateLimit?: string): Promise<LoadTarget> {
  const api = (method: string, route: string, body?: unknown) => request(url, method, route, { host: 'api.localhost', bearer: credentials.token, body });
  const fn = (await api('POST', '/v2/svc/functions', {
    name, containerImage: 'local/echo:1', inferenceUrl: '/echo', inferencePort: 8000, containerEnvironment: [{ key: 'ECHO_HEADERS', value: 'false' }],
    health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT5S', expectedStatusCode: 200 },
    ...(rateLimit ? { rateLimit: { rateLimit } } : {}),
  })).body.function;
  await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
    deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 1024 }],
  });
  while ((await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status !== 'ACTIVE') await sleep(100);
  return {
    origin: url.replace('localhost', '127.0.0.1'), path: `/v2/svc/pexec/functions/${fn.id}`, body: BODY,
    headers: { 'content-type': 'application/json', host: 'api.localhost', authorization: `Bearer ${credentials.apiKey}` },
  };
}

/** Unlimited and limited, in turn, ROUNDS times; medians per row. */
async function compare(label: string, unlimited: LoadTarget, limited: LoadTarget): Promise<(string | number)[][]> {
  const results: Record<'unlimited' | 'limited', LoadResult[]> = { unlimited: [], limited: [] };
  await load(unlimited, CONCURRENCY, 1);
  await load(limited, CONCURRENCY, 1);
  for (let round = 0; round < ROUNDS; round++) {
    results.unlimited.push(await load(unlimited, CONCURRENCY, SECONDS));
    results.limited.push(await load(limited, CONCURRENCY, SECONDS));
  }
  const row = (name: string, runs: LoadResult[]) => [name, median(runs.map((run) => run.requestsPerSecond)), median(runs.map((run) => run.p50)),
    median(runs.map((run) => run.p99)), runs.reduce((sum, run) => sum + run.errors, 0)];
  const ratio = median(results.limited.map((run, index) => run.requestsPerSecond / results.unlimited[index].requestsPerSecond));
  return [
    [...row(`${label}: no rate limit`, results.unlimited), 1],
    [...row(`${label}: rateLimit 100000000-S`, results.limited), ratio],
  ];
}

const LIMIT = '100000000-S';
const stops: (() => Promise<void>)[] = [];
try {
  const platform = await servePlatform({ SVC_LOG_LEVEL: 'warn', SVC_TURN_SERVER: 'none' });
  stops.push(() => platform.stop());
  const credentials = await platform.credentials(['invoke_function', 'list_functions']);
  const rows = await compare('1 process', await deployEcho(platform.url, credentials, 'open'), await deployEcho(platform.url, credentials, 'limited', LIMIT));

  if ((await postgresAvailable()) && natsServerAvailable()) {
    const database = await createDatabase('postgres');
    const nats = await startNats();
    stops.push(() => database.drop(), () => nats.stop());
    const shared = { ...nats.env, SVC_DATABASE_URL: database.databaseUrl, SVC_SECRETS_KEY: randomBytes(32).toString('base64'), SVC_LOG_LEVEL: 'warn', SVC_TURN_SERVER: 'none' };
    const first: ServedPlatform = await servePlatform(shared);
    const second: ServedPlatform = await servePlatform({ ...shared, SVC_PLACEMENT: 'false', SVC_LOCAL_CLUSTER: 'false' }, { replica: true });
    stops.unshift(() => second.stop(), () => first.stop());
    const both = async (target: LoadTarget) => {
      const pair = { ...target, origin: [target.origin as string, second.url.replace('localhost', '127.0.0.1')] };
      // The second replica learns the instance from the first over NATS.
      while ((await load({ ...pair, origin: pair.origin[1] }, 1, 0.2)).errors > 0) await sleep(200);
      return pair;
    };
    const replicaCredentials = await first.credentials(['invoke_function', 'list_functions']);
    rows.push(...await compare('2 replicas on NATS',
      await both(await deployEcho(first.url, replicaCredentials, 'open')), await both(await deployEcho(first.url, replicaCredentials, 'limited', LIMIT))));
  } else {
    console.log('bench/ratelimit: the two-replica rows need PostgreSQL on 127.0.0.1:5432 and nats-server; skipped');
  }
  printTable(`pexec at c=${CONCURRENCY}, ${ROUNDS} rounds of ${SECONDS} s (medians)`, ['path', 'req/s', 'p50 ms', 'p99 ms', 'errors', 'ratio'], rows);
} finally {
  for (const stop of stops) await stop().catch(() => {});
}
