// Requests always end when their version stops taking requests: a blue/green update with a graceful
// undeploy moves what waits to the other version and lets what runs finish; a request pinned to an
// undeployed version, or one whose version goes ERROR while it waits, ends with the Problem a new request
// would get (through its 202's status poll too).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { metricValue } from './helpers/autoscaler-platform.ts';
import { echoBody, localSpec } from './helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { until } from './helpers/wait.ts';

const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 };
const slow = (name?: string) => echoBody({ name, containerImage: 'local/slow:1', inferenceUrl: '/slow', health });

describe('requests always end when their version stops taking requests', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions', 'queue_details']);
  });
  after(() => svc.close());

  /** A request with a 1 s poll window, then its status polled until the final answer. */
  async function invoke(path: string, body: unknown) {
    let response = await svc.api('POST', path, { bearer: key, body, headers: { 'svc-poll-seconds': '1' } });
    while (response.status === 202) {
      response = await svc.api('GET', `/v2/svc/pexec/status/${response.headers['svc-reqid']}`, { bearer: key, headers: { 'svc-poll-seconds': '5' } });
    }
    return response;
  }

  /** Waits until a version runs `running` requests and has `waiting` in its queue (the platform's metrics, not a sleep). */
  async function loadReaches(fn: Deployed, running: number, waiting: number): Promise<void> {
    const load = async (name: string) => metricValue((await svc.api('GET', '/metrics')).text, name, { function_version_id: fn.versionId });
    await until(`${running} running and ${waiting} waiting`, async () =>
      (await load('svc_function_inflight_requests')) === running && (await load('svc_function_queue_depth')) === waiting);
  }

  async function newVersion(fn: Deployed): Promise<Deployed> {
    const created = await svc.api('POST', `/v2/svc/functions/${fn.id}/versions`, { bearer: token, body: slow(fn.name) });
    assert.equal(created.status, 200, created.text);
    const version = created.body.function;
    const deployed = await svc.api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${version.versionId}`, {
      bearer: token, body: { deploymentSpecifications: [localSpec({ minInstances: 1, maxInstances: 1 })] },
    });
    assert.equal(deployed.status, 200, deployed.text);
    return { id: fn.id, versionId: version.versionId, name: fn.name };
  }

  test('blue/green: 12 requests of 1 s to the function while v1 is undeployed gracefully all answer 200', async () => {
    const v1 = await deploy(svc, token, slow(), { maxInstances: 1 });
    const v2 = await newVersion(v1);
    await Promise.all([waitFor(svc, key, v1, running), waitFor(svc, key, v2, running)]);
    const answers: Promise<{ status: number }>[] = [];
    for (let i = 0; i < 12; i++) {
      answers.push(invoke(`/v2/svc/pexec/functions/${v1.id}`, { seconds: 1 }));
      if (i === 5) {
        const removed = await svc.api('DELETE', `/v2/svc/deployments/functions/${v1.id}/versions/${v1.versionId}?graceful=true`, { bearer: token });
        assert.equal(removed.status, 200, removed.text);
      }
      await sleep(200);
    }
    const statuses = (await Promise.all(answers)).map((answer) => answer.status);
    assert.deepEqual(statuses, Array(12).fill(200));
    await waitFor(svc, key, v1, (record) => record.activeInstances.length === 0);
  });

  test('undeployed without a grace: requests waiting for it that named only the function move to the other version', async () => {
    const v1 = await deploy(svc, token, slow(), { maxInstances: 1 });
    await waitFor(svc, key, v1, running);
    const runningOne = invoke(`/v2/svc/pexec/functions/${v1.id}`, { seconds: 30 });
    await loadReaches(v1, 1, 0);
    const waiting = [invoke(`/v2/svc/pexec/functions/${v1.id}`, { seconds: 0.1 }), invoke(`/v2/svc/pexec/functions/${v1.id}`, { seconds: 0.1 })];
    await loadReaches(v1, 1, 2);
    const v2 = await newVersion(v1);
    await waitFor(svc, key, v2, running);
    await svc.api('DELETE', `/v2/svc/deployments/functions/${v1.id}/versions/${v1.versionId}`, { bearer: token });
    assert.deepEqual((await Promise.all(waiting)).map((answer) => answer.status), [200, 200]);
    assert.equal((await runningOne).status, 502, 'the running one ended with its instance');
    const moved = svc.logs.filter((line) => line.includes('a waiting request moved to another version') && line.includes(v2.versionId));
    assert.equal(moved.length, 2, moved.join('\n'));
  });

  test('undeployed without a grace: the running request ends 502, a waiting one pinned to the version and one with no other version end 404', async () => {
    const fn = await deploy(svc, token, slow(), { maxInstances: 1 });
    await waitFor(svc, key, fn, running);
    const runningOne = invoke(`/v2/svc/pexec/functions/${fn.id}`, { seconds: 3 });
    await loadReaches(fn, 1, 0);
    const pinned = invoke(`/v2/svc/pexec/functions/${fn.id}/versions/${fn.versionId}`, { seconds: 0.1 });
    const unpinned = invoke(`/v2/svc/pexec/functions/${fn.id}`, { seconds: 0.1 });
    await loadReaches(fn, 1, 2);
    await svc.api('DELETE', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token });
    const [ran, pinnedAnswer, unpinnedAnswer] = await Promise.all([runningOne, pinned, unpinned]) as { status: number; body: any }[];
    assert.equal(ran.status, 502);
    for (const answer of [pinnedAnswer, unpinnedAnswer]) {
      assert.equal(answer.status, 404, JSON.stringify(answer.body));
      assert.match(answer.body.detail, new RegExp(`not deployed; the request waited for version '${fn.versionId}' and was not run`));
    }
  });

  test('a request queued while its version is DEPLOYING ends 503 when the version goes ERROR', async () => {
    const broken = { ...slow(), health: { ...health, uri: '/no-such-health-path' } };
    const fn = await deploy(svc, token, broken, { maxInstances: 1, configuration: { startupGracePeriod: 'PT2S' } });
    const answer = await invoke(`/v2/svc/pexec/functions/${fn.id}`, { seconds: 0.1 }) as { status: number; body: any };
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.match(answer.body.detail, /is ERROR and takes no requests now; the request waited for version .* and was not run/);
  });
});
