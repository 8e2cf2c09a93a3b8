// Placement under pressure: a shared cluster filled by two accounts, and a deployment that cannot be
// placed while requests wait for it (the runaway of issue 15, on the synchronous SQLite driver).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { echoBody, localSpec } from './helpers/fixtures.ts';
import { deploy } from './helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { until } from './helpers/wait.ts';

const run = promisify(execFile);
const svcBin = path.resolve(import.meta.dirname, '../bin/svc.js');
const twoSlots = { compute: { localCluster: { gpus: [{ name: 'LOCAL', capacity: 2, instanceTypes: [{ name: 'LOCAL.CPU_1x', default: true }] }] } } };

describe('a shared cluster full of two accounts', () => {
  let svc: TestPlatform;
  let tokenA: string;
  let tokenB: string;

  before(async () => {
    svc = await startTestPlatform({ config: twoSlots });
    tokenA = await svc.token();
    await svc.api('POST', '/v2/svc/accounts/b', { bearer: await svc.adminToken(), body: {} });
    tokenB = await svc.token({ ncaId: 'b' });
  });
  after(() => svc.close());

  test('a deployment with requests waiting for it keeps the platform answering, and says why it is not placed', async () => {
    await deploy(svc, tokenB, echoBody({ name: 'b-one' }));
    await deploy(svc, tokenA, echoBody({ name: 'a-one' }));
    // The cluster is full; A deploys again, held at zero, and a request waits for it.
    const waiting = await deploy(svc, tokenA, echoBody({ name: 'a-two' }), { minInstances: 0, maxInstances: 1 });
    const key = await svc.apiKey(tokenA, ['invoke_function']);
    const roundsBefore = await placementRounds(svc);
    const invoked = await svc.api('POST', `/v2/svc/pexec/functions/${waiting.id}`, {
      bearer: key, headers: { 'svc-poll-seconds': '1' }, body: { message: 'waits' },
    });
    assert.equal(invoked.status, 202, 'the request waits in its queue');
    // A waiting request prompts one round, then the periodic ones (every 2 s) try again: a handful, not
    // a round chained to the next as fast as the store answers.
    const rounds = await placementRounds(svc) - roundsBefore;
    assert.ok(rounds < 10, `${rounds} placement rounds while one request waited a second`);

    // Placement keeps running rounds for it, yet every other request is served.
    const ready = await svc.api('GET', '/admin/health/readiness');
    assert.equal(ready.status, 200);
    const again = await deploy(svc, tokenB, echoBody({ name: 'b-two' }));
    const deployment = await until('the unplaced deployment to say why', async () => {
      const response = await svc.api('GET', `/v2/svc/deployments/functions/${again.id}/versions/${again.versionId}`, { bearer: tokenB });
      return response.body.deployment.healthInfo?.length ? response.body.deployment : undefined;
    });
    assert.equal(deployment.functionStatus, 'DEPLOYING');
    assert.match(deployment.healthInfo[0].error, /no capacity: .*LOCAL.*2 of 2 in use/);
  });
});

describe('per-account instance quota', () => {
  let svc: TestPlatform;
  let token: string;

  before(async () => {
    svc = await startTestPlatform();
    await svc.api('POST', '/v2/svc/accounts/small', { bearer: await svc.adminToken(), body: {} });
    token = await svc.token({ ncaId: 'small' });
  });
  after(() => svc.close());

  test('maxInstancesAllowed: set with PATCH, deployments beyond it refused, instances beyond it not placed and the reason shown', async () => {
    const limited = await svc.api('PATCH', '/v2/svc/accounts/small', { bearer: await svc.adminToken(), body: { maxInstancesAllowed: 2 } });
    assert.equal(limited.status, 200);
    assert.equal(limited.body.account.maxInstancesAllowed, 2);

    await deploy(svc, token, echoBody({ name: 'q-one' }));
    await deploy(svc, token, echoBody({ name: 'q-two' }));
    const third = (await svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name: 'q-three' }) })).body.function;
    const refused = await svc.api('POST', `/v2/svc/deployments/functions/${third.id}/versions/${third.versionId}`, {
      bearer: token, body: { deploymentSpecifications: [localSpec({ minInstances: 1 })] },
    });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.type, 'urn:svc:problem-details:quota-exceeded');
    assert.equal(refused.body.detail, "Account 'small': Reached or exceeded the max limit for the number of instances allowed: 2.");

    // Held at zero, it may deploy; a request wakes it, but the account has no instance left.
    const waking = await deploy(svc, token, echoBody({ name: 'q-four' }), { minInstances: 0, maxInstances: 2 });
    const key = await svc.apiKey(token, ['invoke_function']);
    const invoked = await svc.api('POST', `/v2/svc/pexec/functions/${waking.id}`, { bearer: key, headers: { 'svc-poll-seconds': '1' }, body: {} });
    assert.equal(invoked.status, 202);
    const deployment = await until('the deployment to say why', async () => {
      const response = await svc.api('GET', `/v2/svc/deployments/functions/${waking.id}/versions/${waking.versionId}`, { bearer: token });
      return response.body.deployment.healthInfo ? response.body.deployment : undefined;
    });
    assert.match(deployment.healthInfo[0].error, /^1 of 1 instances not placed: account quota: 2 of 2 instances in use \(maxInstancesAllowed\)$/);

    const listed = await run(process.execPath, [svcBin, 'function', 'list'], {
      env: { ...process.env, SVC_SERVER: svc.url, SVC_TOKEN: token, XDG_CONFIG_HOME: path.join(svc.database.dataDir, 'cli') },
    });
    const row = listed.stdout.split('\n').find((line) => line.includes(waking.versionId));
    assert.match(row ?? '', /account quota: 2 of 2 instances in use/, listed.stdout);
  });
});

async function placementRounds(svc: TestPlatform): Promise<number> {
  const text = (await svc.api('GET', '/metrics')).text;
  return Number(/^svc_placement_rounds_total (\d+)/m.exec(text)?.[1]);
}
