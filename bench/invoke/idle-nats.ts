// bench/invoke/idle-nats.ts: what API replicas say to each other over NATS while nobody calls anything.
// One `svc serve` on PostgreSQL and a NATS server of the bench's own (with a user and password, and its
// monitoring port), BENCH_VERSIONS echo versions deployed and each invoked once through every replica;
// then, once the platform has settled (spare slots given back), the server's message counters (/varz:
// messages in from clients, out to them) over BENCH_IDLE_SECONDS. Then a second replica joins and the same
// is measured again. Printed side by side, per second and per version.
// Target (issue 27): idle traffic flat in replicas × versions: watches, not polls.
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { createDatabase, postgresAvailable } from '../../api/test/helpers/databases.ts';
import { request } from '../../api/test/helpers/http.ts';
import { natsServerAvailable, startNats, type TestNats } from '../../api/test/helpers/nats.ts';
import { servePlatform, type ServedPlatform } from '../../api/test/helpers/served.ts';
import { printTable } from '../lib/report.ts';

const VERSIONS = Number(process.env.BENCH_VERSIONS ?? 2);
const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 15);
/** Long enough for spare slots taken by the warm-up calls to go back (two renewal periods of leases.ts). */
const SETTLE_SECONDS = Number(process.env.BENCH_SETTLE_SECONDS ?? 12);

if (!(await postgresAvailable()) || !natsServerAvailable()) {
  console.log('bench/invoke/idle-nats needs PostgreSQL on 127.0.0.1:5432 and nats-server; skipped');
  process.exit(0);
}

const database = await createDatabase('postgres');
const nats = await startNats({ monitor: true });
const replicas: ServedPlatform[] = [];
try {
  const shared = { ...nats.env, SVC_DATABASE_URL: database.databaseUrl, SVC_SECRETS_KEY: randomBytes(32).toString('base64'), SVC_LOG_LEVEL: 'warn' };
  replicas.push(await servePlatform(shared));
  const credentials = await replicas[0].credentials(['invoke_function', 'list_functions']);
  const api = (method: string, route: string, body?: unknown) => request(replicas[0].url, method, route, { host: 'api.localhost', bearer: credentials.token, body });
  const functions: string[] = [];
  for (let i = 0; i < VERSIONS; i++) {
    const fn = (await api('POST', '/v2/svc/functions', {
      name: `idle-echo-${i}`, containerImage: 'local/echo:1', inferenceUrl: '/echo', inferencePort: 8000,
      health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT5S', expectedStatusCode: 200 },
    })).body.function;
    await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 4 }],
    });
    while ((await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).body.function.status !== 'ACTIVE') await sleep(200);
    functions.push(fn.id);
  }
  /** Every version answers through every replica (a replica learns instances over NATS, so it may take a moment). */
  const invokeAll = async () => {
    for (const replica of replicas) {
      for (const functionId of functions) {
        for (let tries = 0; ; tries++) {
          const answer = await request(replica.url, 'POST', `/v2/svc/pexec/functions/${functionId}`, {
            host: 'api.localhost', bearer: credentials.apiKey, body: { idle: true }, headers: { 'svc-poll-seconds': '5' },
          });
          if (answer.status === 200) break;
          if (tries > 100) throw new Error(`${replica.url} does not serve ${functionId}: ${answer.status} ${answer.text}`);
          await sleep(200);
        }
      }
    }
  };
  const idle = async (): Promise<{ in: number; out: number }> => {
    await invokeAll();
    await sleep(SETTLE_SECONDS * 1000);
    const before = await nats.messages();
    await sleep(IDLE_SECONDS * 1000);
    const after = await nats.messages();
    return { in: (after.in - before.in) / IDLE_SECONDS, out: (after.out - before.out) / IDLE_SECONDS };
  };
  const rows: (string | number)[][] = [];
  const row = (name: string, rate: { in: number; out: number }) =>
    rows.push([name, rate.in, rate.out, (rate.in + rate.out) / VERSIONS]);
  row('1 replica (placement)', await idle());
  replicas.push(await servePlatform({ ...shared, SVC_PLACEMENT: 'false', SVC_LOCAL_CLUSTER: 'false' }, { replica: true }));
  row('2 replicas', await idle());
  printTable(
    `bench/invoke/idle-nats: ${VERSIONS} deployed versions, each invoked once per replica, then idle ${IDLE_SECONDS} s after ${SETTLE_SECONDS} s `
      + `(NATS /varz; load ${os.loadavg().map((n) => n.toFixed(1)).join(' ')})`,
    ['replicas', 'msgs in/s', 'msgs out/s', '(in+out)/s per version'], rows,
  );
  console.log('target: idle traffic flat in replicas × versions (issue 27)');
} finally {
  for (const replica of replicas.reverse()) await replica.stop();
  await database.drop();
  await (nats as TestNats).stop();
}
