// bench/invoke/capacity.ts: throughput per slot when callers outnumber the slots, so that every request
// waits for one and the hand-over of a slot from one request to the next is what is measured. The echo
// sample with BENCH_SLOTS concurrent requests (maxRequestConcurrency), BENCH_CALLERS closed-loop callers
// on pexec, in rounds (medians): one process on its embedded store, one replica on PostgreSQL and NATS,
// and two replicas on them behind a round-robin client. Two tables: an echo that answers at once (what
// bounds it is the CPU the processes spend per request, on a machine that also runs the callers), and one
// that answers BENCH_DELAY_MS later (what bounds it is the slots and how soon each passes to the next
// request). CPU per request counts the API processes and, on the NATS rows, nats-server. The replicas on
// NATS send through the instance's node's result keeper (in the first replica's agent), but for the last
// row's (SVC_RESULT_KEEPERS=false), which shows what that hop costs.
// Target (issue 27): at capacity, two replicas reach ≥ 0.8× one process's req/s per slot.
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { createDatabase, postgresAvailable } from '../../api/test/helpers/databases.ts';
import { natsServerAvailable, startNats } from '../../api/test/helpers/nats.ts';
import { servePlatform, type ServedPlatform } from '../../api/test/helpers/served.ts';
import { cpuMicros } from '../lib/cpu.ts';
import { deployEcho } from '../lib/echo.ts';
import { load, type LoadResult, type LoadTarget } from '../lib/load.ts';
import { median, printTable } from '../lib/report.ts';

const SLOTS = Number(process.env.BENCH_SLOTS ?? 4);
const CALLERS = Number(process.env.BENCH_CALLERS ?? 32);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DELAY_MS = Number(process.env.BENCH_DELAY_MS ?? 5);

if (!(await postgresAvailable()) || !natsServerAvailable()) {
  console.log('bench/invoke/capacity needs PostgreSQL on 127.0.0.1:5432 and nats-server; skipped');
  process.exit(0);
}

const quiet = { SVC_LOG_LEVEL: 'warn' };
const database = await createDatabase('postgres');
const nats = await startNats();
const started: ServedPlatform[] = [];
const serve = async (env: NodeJS.ProcessEnv, replica = false) => {
  const platform = await servePlatform({ ...quiet, ...env }, { replica });
  started.push(platform);
  return platform;
};
try {
  const single = await serve({});
  const shared = { ...nats.env, SVC_DATABASE_URL: database.databaseUrl, SVC_SECRETS_KEY: randomBytes(32).toString('base64') };
  const first = await serve(shared);
  const others = { ...shared, SVC_PLACEMENT: 'false', SVC_LOCAL_CLUSTER: 'false' };
  const second = await serve(others, true);
  // Two more that send straight to the instance, not through its node's result keeper.
  const straight = [await serve({ ...others, SVC_RESULT_KEEPERS: 'false' }, true), await serve({ ...others, SVC_RESULT_KEEPERS: 'false' }, true)];
  const [singleCredentials, firstCredentials] = [await single.credentials(['invoke_function']), await first.credentials(['invoke_function'])];
  const originOf = (platform: ServedPlatform) => platform.url.replace('localhost', '127.0.0.1');
  for (const delayMs of [0, DELAY_MS]) {
    const { target: alone } = await deployEcho(single.url, singleCredentials, SLOTS, delayMs);
    const { target: onNats } = await deployEcho(first.url, firstCredentials, SLOTS, delayMs);
    const both = { ...onNats, origin: [onNats.origin as string, originOf(second)] };
    const direct = { ...onNats, origin: straight.map(originOf) };
    // The other replicas learn the instance from the first over NATS.
    for (const origin of [...both.origin, ...direct.origin]) {
      while ((await load({ ...onNats, origin }, 1, 0.2)).errors > 0) await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await measure(delayMs, {
      'one process (embedded store)': { target: alone, pids: [single.process.pid!] },
      'one replica on PostgreSQL and NATS': { target: onNats, pids: [first.process.pid!, nats.pid] },
      'two replicas on PostgreSQL and NATS': { target: both, pids: [first.process.pid!, second.process.pid!, nats.pid] },
      'two replicas, no result keeper': { target: direct, pids: [first.process.pid!, ...straight.map((platform) => platform.process.pid!), nats.pid] },
    });
  }
  console.log('target: two replicas ≥ 0.8× one process per slot');
} finally {
  for (const platform of started.reverse()) await platform.stop();
  await database.drop();
  await nats.stop();
}

/** Rounds of each row in turn; the table of their medians. */
async function measure(delayMs: number, rows: Record<string, { target: LoadTarget; pids: number[] }>) {
  for (const { target } of Object.values(rows)) await load(target, CALLERS, 1);
  const rounds: Record<string, (LoadResult & { cpu: number })[]> = {};
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, { target, pids }] of Object.entries(rows)) {
      const before = cpuMicros(pids);
      const result = await load(target, CALLERS, SECONDS);
      (rounds[name] ??= []).push({ ...result, cpu: (cpuMicros(pids) - before) / (result.requestsPerSecond * SECONDS) });
    }
  }
  const perSlot = (name: string) => median(rounds[name].map((result) => result.requestsPerSecond)) / SLOTS;
  const baseline = perSlot('one process (embedded store)');
  const answered = delayMs ? `answered ${delayMs} ms after it came` : 'answered at once';
  printTable(`bench/invoke/capacity: ${CALLERS} callers on ${SLOTS} slots, each request ${answered}, medians of ${ROUNDS} rounds of ${SECONDS} s (load ${os.loadavg()[0].toFixed(1)})`,
    ['path', 'req/s per slot', 'p50 ms', 'p99 ms', '× one process', 'CPU µs/req', 'errors'],
    Object.entries(rounds).map(([name, results]) => [name, perSlot(name), median(results.map((result) => result.p50)),
      median(results.map((result) => result.p99)), perSlot(name) / baseline, Math.round(median(results.map((result) => result.cpu))),
      results.reduce((sum, result) => sum + result.errors, 0)]));
}
