// bench/placement/takeover.ts: how long placement is away when the process running it goes, side by side.
// Elected (compute.placement elected): two `svc serve` replicas on PostgreSQL and a NATS server of the
// bench's own, one `svc agent` given both URLs; the lease holder is killed with kill -9 (then started again)
// or stopped with SIGTERM. Fixed (the former layout: one replica with placement true, which Kubernetes
// `Recreate` restarts): kill -9, then the process is started again at once (a pod also waits to be
// scheduled and to pass its probes: not counted here). Per event: until another term holds the lease, until
// the agent is served again (its hello answered), and until a deployment made at that moment runs;
// the undisturbed deployment is the baseline. BENCH_ROUNDS rounds per event (default 2).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openDatabase } from '../../api/src/database.ts';
import { createDatabase, postgresAvailable, tempDir, type TestDatabase } from '../../api/test/helpers/databases.ts';
import { request } from '../../api/test/helpers/http.ts';
import { natsServerAvailable, startNats } from '../../api/test/helpers/nats.ts';
import { TEST_CATALOG } from '../../api/test/helpers/platform.ts';
import { servePlatform, type ServedPlatform } from '../../api/test/helpers/served.ts';
import { until } from '../../api/test/helpers/wait.ts';
import { median, printTable } from '../lib/report.ts';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const svcBin = path.resolve(import.meta.dirname, '../../api/bin/svc.js');

if (!(await postgresAvailable()) || !natsServerAvailable()) {
  console.log('bench/placement/takeover needs PostgreSQL on 127.0.0.1:5432 and nats-server; skipped');
  process.exit(0);
}

/** An nvidia-smi that lists 16 L40S: room for every deployment the bench makes. */
function gpuHost(): string {
  const dir = tempDir('svc-gpus-');
  writeFileSync(path.join(dir, 'nvidia-smi'), `#!/bin/sh\nprintf "${'NVIDIA L40S, 46068 MiB\\n'.repeat(16)}"\n`);
  chmodSync(path.join(dir, 'nvidia-smi'), 0o755);
  return dir;
}

interface Installation {
  replicas: ServedPlatform[];
  agent: ChildProcess;
  database: TestDatabase;
  token: string;
  /** The agent's last hello answered (its node's lease granted), as the store says. */
  helloAt(): Promise<number>;
  epoch(): Promise<number>;
  holder(): Promise<ServedPlatform>;
  close(): Promise<void>;
}

async function install(placement: 'elected' | 'true', count: number, natsEnv: Record<string, string>): Promise<Installation> {
  const database = await createDatabase('postgres');
  const env = {
    ...natsEnv, SVC_DATABASE_URL: database.databaseUrl!, SVC_SECRETS_KEY: randomBytes(32).toString('base64'), SVC_LOG_LEVEL: 'warn',
    SVC_PLACEMENT: placement, SVC_LOCAL_CLUSTER: 'false', SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG,
  };
  const replicas = [await servePlatform(env)];
  for (let i = 1; i < count; i++) replicas.push(await servePlatform(env, { replica: true }));
  const { token } = await replicas[0].credentials([]);
  const registered = await request(replicas[0].url, 'POST', '/v1/accounts/svc-default/clusters', {
    host: 'api.localhost', bearer: token,
    body: { clusterName: 'bench', clusterGroupName: 'bench-group', gpus: [{ name: 'L40S', capacity: 16, instanceTypes: [{ name: 'LOCAL.GPU.L40S_1x' }] }] },
  });
  const state = tempDir('svc-agent-');
  const agent = spawn(process.execPath, [svcBin, 'agent'], {
    env: {
      ...process.env, PATH: `${gpuHost()}:${process.env.PATH}`, SVC_AGENT_SERVER: replicas.map((replica) => replica.url).join(','),
      SVC_AGENT_CREDENTIAL: registered.body.agentCredential, SVC_AGENT_NODE_NAME: 'bench', SVC_AGENT_STATE_DIR: state, SVC_DATA_DIR: state,
      SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_LOG_LEVEL: 'warn', SVC_AGENT_SANDBOX: 'off', SVC_AGENT_UDP_PORT_RANGE: '48800-48899',
    },
    stdio: 'ignore',
  });
  const store = await openDatabase({ dataDir: tempDir(), databaseUrl: database.databaseUrl });
  const lease = async () => (await store.db.selectFrom('placement_lease' as never).selectAll().executeTakeFirst()) as { epoch: number; address: string } | undefined;
  const installation: Installation = {
    replicas, agent, database, token,
    async helloAt() {
      const node = await store.db.selectFrom('nodes').select(['updated_at', 'linked']).executeTakeFirst();
      return node?.linked ? Date.parse(node.updated_at) : 0;
    },
    epoch: async () => (await lease())?.epoch ?? 0,
    async holder() {
      if (placement === 'true') return replicas[0];
      const address = (await until('a lease holder', lease, 30_000)).address;
      return replicas.find((replica) => address.endsWith(`:${replica.port}`))!;
    },
    async close() {
      agent.kill('SIGTERM');
      await new Promise((resolve) => agent.once('exit', resolve));
      for (const replica of replicas) await replica.stop();
      await store.close();
      await database.drop();
    },
  };
  await until('the agent served', async () => (await installation.helloAt()) > 0, 60_000);
  return installation;
}

/** Seconds from `from` until a new echo deployment, made now through `via`, has a RUNNING instance. */
async function deployRunning(installation: Installation, via: () => ServedPlatform, from: number): Promise<number> {
  // Through a replica that may be restarting: each call is tried again until it is answered.
  const api = (method: string, target: string, body?: unknown) => until(`${method} ${target}`, () =>
    request(via().url, method, target, { host: 'api.localhost', bearer: installation.token, body }).then((answer) => answer.status === 200 && answer.body, () => undefined), 120_000);
  const { function: fn } = await api('POST', '/v2/svc/functions', {
    name: `takeover-${randomBytes(3).toString('hex')}`, containerImage: 'local/echo:1', inferenceUrl: '/echo', inferencePort: 8000,
    health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 },
  });
  await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
    deploymentSpecifications: [{ gpu: 'L40S', instanceType: 'LOCAL.GPU.L40S_1x', clusters: ['bench'], minInstances: 1, maxInstances: 1 }],
  });
  await until('the deployment RUNNING', async () => {
    const record = (await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).function;
    return record.activeInstances?.some((instance: any) => instance.instanceStatus === 'RUNNING');
  }, 120_000);
  return (Date.now() - from) / 1000;
}

/** One disturbance of the process running placement, measured (with no lease, its column is empty). */
async function disturb(installation: Installation, act: (holder: ServedPlatform) => Promise<void>, elected = true): Promise<number[]> {
  const holder = await installation.holder();
  const [epoch, before] = [await installation.epoch(), Date.now()];
  const survivor = () => installation.replicas.find((replica) => replica !== holder) ?? holder;
  const acted = act(holder);
  const placed = deployRunning(installation, survivor, before).catch(() => Number.NaN);
  const leased = elected ? until('another term', async () => (await installation.epoch()) > epoch, 60_000).then(() => (Date.now() - before) / 1000) : Number.NaN;
  const served = until('the agent served again', async () => (await installation.helloAt()) >= before, 60_000).then(() => (Date.now() - before) / 1000);
  const figures = [await leased, await served, await placed];
  await acted;
  return figures;
}

const nats = await startNats();
const rows: (string | number)[][] = [];
const record = (name: string, samples: number[][]) => rows.push([name, ...[0, 1, 2].map((column) => median(samples.map((sample) => sample[column])))]);
try {
  const elected = await install('elected', 2, nats.env);
  try {
    rows.push(['undisturbed (elected)', Number.NaN, Number.NaN, await deployRunning(elected, () => elected.replicas[0], Date.now())]);
    const kills: number[][] = [];
    const stops: number[][] = [];
    for (let round = 0; round < ROUNDS; round++) {
      kills.push(await disturb(elected, async (holder) => {
        await holder.kill9();
        await holder.restart();
      }));
      stops.push(await disturb(elected, async (holder) => {
        holder.process.kill('SIGTERM');
        await new Promise((resolve) => holder.process.once('exit', resolve));
        await holder.restart();
      }));
    }
    record('elected, kill -9 of the holder', kills);
    record('elected, SIGTERM of the holder', stops);
  } finally {
    await elected.close();
  }
  const fixed = await install('true', 1, nats.env);
  try {
    const restarts: number[][] = [];
    for (let round = 0; round < ROUNDS; round++) {
      restarts.push(await disturb(fixed, async (only) => {
        await only.kill9();
        await only.restart();
      }, false));
    }
    record('one placement replica, kill -9 + restart', restarts);
  } finally {
    await fixed.close();
  }
} finally {
  await nats.stop();
}
printTable(`placement away, seconds (median of ${ROUNDS}; lease ${5} s; load ${os.loadavg()[0].toFixed(1)} on ${os.availableParallelism()} cores)`,
  ['event', 'lease held again', 'agent served again', 'deployment made then RUNNING'], rows);
