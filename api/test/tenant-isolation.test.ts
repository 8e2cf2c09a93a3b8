// A hostile tenant on the whole platform (issue 25): account B deploys a probe function
// (fixtures/functions/probe.ts) on the local cluster's sandboxed process runtime, with nothing but its own
// credentials, and tries what took the installation over before: the platform's keys and store, account
// A's secrets, environment and instance, the host's PostgreSQL and NATS, writes outside its sandbox,
// memory and processes without end, and FIFOs planted where the agent reads. Every attempt is refused,
// each with its own assertion. A second part runs an agent that cannot have a sandbox (not root): its
// cluster then runs only its own account's functions, and another account's deployment is refused 409.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from './helpers/http.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { TEST_CATALOG, startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { needsSandbox } from './helpers/sandbox.ts';
import { until } from './helpers/wait.ts';

const skip = needsSandbox('the hostile tenant on the platform');
const probeBody = (extra: Record<string, unknown> = {}) => ({
  containerImage: 'test/probe', inferenceUrl: '/probe', inferencePort: 8000,
  health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 }, ...extra,
});

describe('a hostile tenant on the sandboxed process runtime', { skip }, () => {
  let svc: TestPlatform;
  let tokenA: string;
  let tokenB: string;
  let keyB: string;
  let victim: Deployed;
  let hostile: Deployed;
  let victimAddress: { addresses: string[]; port: number };
  const probe = async (body: Record<string, unknown>) => {
    const answer = await svc.api('POST', `/v2/svc/pexec/functions/${hostile.id}`, { bearer: keyB, body });
    assert.equal(answer.status, 200, answer.text);
    return answer.body;
  };

  before(async () => {
    svc = await startTestPlatform({
      backend: 'postgres',
      config: { compute: { agent: { sandbox: 'on', defaultMemory: '256Mi', pidsLimit: 64 } } },
    });
    tokenA = await svc.token();
    await svc.api('POST', '/v2/svc/accounts/tenant-b', { bearer: await svc.adminToken(), body: {} });
    tokenB = await svc.token({ ncaId: 'tenant-b' });
    keyB = await svc.apiKey(tokenB, ['invoke_function', 'list_functions']);
    victim = await deploy(svc, tokenA, probeBody({ secrets: [{ name: 'A_SECRET', value: 'the victim\'s secret' }] }));
    hostile = await deploy(svc, tokenB, probeBody());
    await Promise.all([waitFor(svc, tokenA, victim, running), waitFor(svc, tokenB, hostile, running)]);
    const keyA = await svc.apiKey(tokenA, ['invoke_function']);
    victimAddress = (await svc.api('POST', `/v2/svc/pexec/functions/${victim.id}`, { bearer: keyA, body: { action: 'whoami' } })).body;
  });

  after(async () => {
    await svc?.close();
  });

  test('the platform\'s keys and store are out of reach, so no admin token can be forged', async () => {
    const dataDir = svc.database.dataDir;
    for (const file of ['secrets.key', 'admin-signing-key.pem', 'svc.db']) {
      assert.ok((await probe({ action: 'read', path: path.join(dataDir, file) })).error, file);
    }
    const listed = await probe({ action: 'list', path: dataDir });
    assert.ok(!listed.names?.includes('admin-signing-key.pem'), JSON.stringify(listed));
  });

  test('account A\'s secrets, environment and instance are out of reach', async () => {
    const { cmdlines } = await probe({ action: 'procs' });
    assert.ok(!cmdlines.join(' ').includes('probe.ts') || cmdlines.length <= 4, 'only its own processes');
    const { env } = await probe({ action: 'env' });
    assert.equal(env.A_SECRET, undefined);
    assert.ok(!JSON.stringify(env).includes('the victim'), 'no trace of A in its environment');
    for (const address of victimAddress.addresses) {
      assert.ok((await probe({ action: 'connect', host: address, port: victimAddress.port })).error, `A's instance at ${address}`);
    }
  });

  test('the host\'s PostgreSQL and NATS are out of reach, on loopback and through the host\'s side', async () => {
    const { addresses } = await probe({ action: 'whoami' });
    const hostSide = addresses[0].replace(/\.(\d+)$/, (_: string, last: string) => `.${Number(last) - 1}`);
    for (const host of ['127.0.0.1', hostSide]) {
      for (const port of [5432, 4222]) assert.ok((await probe({ action: 'connect', host, port })).error, `${host}:${port}`);
    }
  });

  test('it writes nothing outside its own directories', async () => {
    assert.ok((await probe({ action: 'write', path: '/etc/tenant-b' })).error);
    assert.ok((await probe({ action: 'write', path: path.join(TEST_CATALOG, '..', 'tenant-b') })).error);
  });

  test('its processes are capped', async () => {
    const { started } = await probe({ action: 'spawn', count: 100 });
    await probe({ action: 'reap' });
    assert.ok(started < 64, `${started} of 100 started`);
  });

  test('FIFOs planted where the agent reads progress leave management calls answered', async () => {
    // Its request directory (where SVC-LARGE-OUTPUT-DIR points) is beside its secrets file.
    const { env } = await probe({ action: 'env' });
    const outputDir = path.join(path.dirname(env.SVC_SECRETS_FILE), 'requests');
    for (let i = 0; i < 8; i++) {
      assert.equal((await probe({ action: 'mkdir', path: path.join(outputDir, `r${i}`) })).ok, true);
      assert.equal((await probe({ action: 'fifo', path: path.join(outputDir, `r${i}`, 'progress') })).ok, true);
    }
    assert.equal((await probe({ action: 'mkdir', path: path.join(outputDir, 'linked') })).ok, true);
    assert.equal((await probe({ action: 'symlink', target: '../r0/progress', path: path.join(outputDir, 'linked', 'progress') })).ok, true);
    await sleep(1000); // several of the agent's progress ticks
    // Before, each FIFO held one of libuv's four threads for good, and JWT checks waited behind them.
    for (let i = 0; i < 20; i++) {
      const answer = await Promise.race([
        request(svc.url, 'GET', '/v2/svc/functions', { host: svc.platform.hosts.api, bearer: tokenA }),
        sleep(5000).then(() => assert.fail('a management call hung behind the planted FIFOs')),
      ]);
      assert.equal(answer.status, 200);
    }
  });

  test('an instance over its memory is killed, and its deployment says why', async () => {
    const hungry = await deploy(svc, tokenB, probeBody({ containerEnvironment: [{ key: 'PROBE_ALLOC_MB', value: '512' }] }));
    await until('the out-of-memory reason', async () => {
      const deployment = (await svc.api('GET', `/v2/svc/deployments/functions/${hungry.id}/versions/${hungry.versionId}`, { bearer: tokenB })).body.deployment;
      return deployment.healthInfo?.some((info: { error: string }) => info.error.includes('killed: out of memory (limit 256 MiB)'));
    }, 30_000);
  });

  test('a reserved environment name is refused at create, naming the field', async () => {
    const refused = await svc.api('POST', '/v2/svc/functions', {
      bearer: tokenB, body: { name: 'preload', ...probeBody({ containerEnvironment: [{ key: 'NODE_OPTIONS', value: '--import=data:,' }] }) },
    });
    assert.equal(refused.status, 400);
    assert.match(refused.text, /containerEnvironment\.0\.key/);
  });
});

describe('an agent that cannot have a sandbox runs only its own account\'s functions', { skip }, () => {
  let svc: TestPlatform;
  let agent: ChildProcess;
  const agentState = mkdtempSync(path.join(os.tmpdir(), 'svc-unsandboxed-'));

  before(async () => {
    svc = await startTestPlatform({ config: { gateway: { host: '127.0.0.1' } } });
  });

  after(async () => {
    agent?.kill('SIGTERM');
    if (agent && agent.exitCode === null) await new Promise((resolve) => agent.once('exit', resolve));
    await svc?.close();
    rmSync(agentState, { recursive: true, force: true });
  });

  test('another account\'s deployment is refused 409 saying what is missing; its own runs', async () => {
    const token = await svc.token();
    const registered = await svc.api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token, body: { clusterName: 'laptop', clusterGroupName: 'laptops', authorizedNCAIds: ['*'], gpus: [{ name: 'LAPTOP', instanceTypes: [{ name: 'LAPTOP_1x' }] }] },
    });
    assert.equal(registered.status, 200, registered.text);
    // A user of no privilege: the agent can make neither network namespaces nor cgroups.
    chownSync(agentState, 65534, 65534);
    agent = spawn(process.execPath, [path.resolve(import.meta.dirname, '../bin/svc.js'), 'agent'], {
      uid: 65534, gid: 65534, stdio: ['ignore', 'ignore', 'inherit'],
      env: {
        PATH: process.env.PATH, SVC_AGENT_SERVER: svc.url, SVC_AGENT_CREDENTIAL: registered.body.agentCredential,
        SVC_AGENT_API_HOST: svc.platform.hosts.api, SVC_AGENT_STATE_DIR: agentState, SVC_DATA_DIR: agentState,
        SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_LOG_LEVEL: 'warn', SVC_AGENT_UDP_PORT_RANGE: '48600-48619',
      },
    });
    await until('the agent connected', async () =>
      (await svc.api('GET', `/v1/accounts/svc-default/clusters/${registered.body.clusterId}`, { bearer: token })).body.status === 'CONNECTED', 30_000);

    await svc.api('POST', '/v2/svc/accounts/other', { bearer: await svc.adminToken(), body: {} });
    const other = await svc.token({ ncaId: 'other' });
    const created = (await svc.api('POST', '/v2/svc/functions', { bearer: other, body: { name: 'elsewhere', ...probeBody() } })).body.function;
    const laptop = { gpu: 'LAPTOP', instanceType: 'LAPTOP_1x', minInstances: 1, maxInstances: 1, clusters: ['laptop'] };
    const refused = await svc.api('POST', `/v2/svc/deployments/functions/${created.id}/versions/${created.versionId}`, {
      bearer: other, body: { deploymentSpecifications: [laptop] },
    });
    assert.equal(refused.status, 409, refused.text);
    assert.match(refused.body.detail, /without a sandbox \(the agent does not run as root.*install bubblewrap and nftables/);

    const own = await deploy(svc, token, probeBody(), laptop);
    await waitFor(svc, token, own, running);
  });
});
