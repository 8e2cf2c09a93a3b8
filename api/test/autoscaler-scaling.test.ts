// The autoscaler on the real platform (in-process metrics source, real agent, real instances): a burst
// raises instances per the GPU specification's policy and quiet brings them back after the stickiness
// window; minInstances 0 goes to zero only after the idle window, and the first requests of a version at
// zero wait and succeed; versions not in a deployable status are skipped once, not retried; a deployment
// path that refuses the desired counts shows in the platform API metrics and stops the round's decisions;
// `svc autoscaler status` shows each version's instances, desired count and why.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import SQLite from 'better-sqlite3';
import { autoscalerCommands } from '../src/cli/commands/autoscaler.ts';
import type { CommandContext } from '../src/cli/command.ts';
import { metricValue, startScalingTestPlatform, type ScalingTestPlatform } from './helpers/autoscaler-platform.ts';
import { localSpec } from './helpers/fixtures.ts';

const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 };
const slowBody = { inferenceUrl: '/slow', inferencePort: 8000, containerImage: 'local/slow:1', health };
const echoBody = { inferenceUrl: '/echo', inferencePort: 8000, containerImage: 'local/echo:1', health };
/** Scale up at once above 50 %; scale down when below 25 % for 1 s of a 2 s window. */
const burstyPolicy = {
  autoscalingConfigurationPolicy: 'CUSTOM_CONFIGURATION',
  autoscalingConfiguration: {
    scaleUpDetails: { factor: 2, threshold: 50 },
    scaleDownDetails: { factor: 0.5, threshold: 25, stickiness: { size: 'PT2S', threshold: 'PT1S' } },
  },
};

interface Version {
  id: string;
  versionId: string;
}

describe('autoscaler on the platform', () => {
  let svc: ScalingTestPlatform;
  let token: string;
  let key: string;
  let names = 0;

  before(async () => {
    svc = await startScalingTestPlatform({ autoscaler: { scaleToZeroIdleSeconds: 1.5 } });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
  });
  after(() => svc.close());

  async function deploy(body: Record<string, unknown>, spec: Record<string, unknown>): Promise<Version> {
    const created = await svc.api('POST', '/v2/svc/functions', { bearer: token, body: { name: `scaled-${++names}`, ...body } });
    assert.equal(created.status, 200, created.text);
    const { id, versionId } = created.body.function;
    const deployed = await svc.api('POST', `/v2/svc/deployments/functions/${id}/versions/${versionId}`, {
      bearer: token, body: { deploymentSpecifications: [localSpec(spec)] },
    });
    assert.equal(deployed.status, 200, deployed.text);
    return { id, versionId };
  }

  async function scaling(fn: Version) {
    const response = await svc.api('GET', '/v2/svc/autoscaler/functions', { bearer: key });
    assert.equal(response.status, 200);
    return response.body.functions.find((entry: any) => entry.functionVersionId === fn.versionId);
  }

  /** Polls the version's scaling status until `until` holds; returns every reason seen on the way. */
  async function watch(fn: Version, until: (entry: any) => boolean, timeoutMs = 20_000) {
    const reasons: string[] = [];
    const deadline = Date.now() + timeoutMs;
    let entry: any;
    while (Date.now() < deadline) {
      entry = await scaling(fn);
      if (entry && reasons[reasons.length - 1] !== entry.reason) reasons.push(entry.reason);
      if (entry && until(entry)) return { entry, reasons };
      await sleep(50);
    }
    throw new Error(`gave up waiting; last: ${JSON.stringify(entry)}; reasons seen: ${reasons.join(' → ')}`);
  }

  const invoke = (fn: Version, body: unknown) =>
    svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body, headers: { 'svc-poll-seconds': '60' } });

  test('a burst raises instances per the policy; quiet brings them back after the stickiness window', async () => {
    const fn = await deploy({ ...slowBody }, { minInstances: 1, maxInstances: 4, ...burstyPolicy });
    await watch(fn, (entry) => entry.instances.running === 1);

    const burst = Array.from({ length: 8 }, () => invoke(fn, { seconds: 1.5 }));
    const up = await watch(fn, (entry) => entry.desiredInstances === 4 && entry.instances.running === 4);
    // The decision's reason shows in the status only until the next round: a loaded machine can poll past
    // it, so the platform's log of the decision says it.
    const decided = svc.logs.filter((line) => line.includes('"msg":"scaling decision"') && line.includes(fn.versionId));
    assert.ok(decided.some((line) => line.includes('"reason":"scale-up"')), `${up.reasons.join(' → ')}; ${decided.join('\n')}`);
    assert.equal(up.entry.policy, 'CUSTOM');
    // 8 waiting on one instance of concurrency 1 is far above 50 %: the decision asks for 16, bounded to 4.
    assert.match(up.entry.detail, /above 50%/);
    const answered = await Promise.all(burst);
    assert.deepEqual(answered.map((response) => response.status), Array(8).fill(200));

    const down = await watch(fn, (entry) => entry.desiredInstances === 1 && entry.instances.running === 1 && entry.instances.starting === 0);
    const waited = down.reasons.indexOf('wait-stickiness');
    assert.ok(waited >= 0 && waited < down.reasons.indexOf('scale-down'), `quiet is held for the stickiness window first: ${down.reasons.join(' → ')}`);
    const metrics = await svc.metricsText();
    const labels = { function_version_id: fn.versionId };
    assert.equal(metricValue(metrics, 'svc_autoscaler_desired_instances', labels), 1);
    assert.ok(metricValue(metrics, 'svc_autoscaler_requests_processed_total') >= 2, 'scale-up and scale-down went through the deployment path');
  });

  test('minInstances 0: requests at zero wait and succeed; the version goes back to zero only after the idle window', async () => {
    const fn = await deploy({ ...echoBody }, { minInstances: 0, maxInstances: 2 });
    const idle = await scaling(fn);
    assert.equal(idle.instances.running + idle.instances.starting, 0);
    assert.equal(idle.desiredInstances, 0);

    const first = await Promise.all([invoke(fn, { n: 1 }), invoke(fn, { n: 2 }), invoke(fn, { n: 3 })]);
    assert.deepEqual(first.map((response) => response.status), [200, 200, 200]);
    assert.deepEqual(first.map((response) => response.body.echo.n), [1, 2, 3]);
    const woken = await scaling(fn);
    assert.equal(woken.functionStatus, 'ACTIVE', 'waking from zero is not a degradation');
    assert.ok(woken.lastInvocationAt, 'the idle clock is in the store');

    const zero = await watch(fn, (entry) => entry.reason === 'scale-to-zero' && entry.instances.running + entry.instances.starting === 0);
    assert.equal(zero.entry.desiredInstances, 0);
    assert.match(zero.entry.detail, /no invocation for/);
    assert.ok(zero.reasons.length >= 2, `warm first: ${zero.reasons.join(' → ')}`);
    const idleFor = Date.parse(zero.entry.decidedAt) - Date.parse(zero.entry.lastInvocationAt);
    assert.ok(idleFor >= 1500, `decided ${idleFor} ms after the last invocation, not before the 1.5 s idle window`);

    // And again from zero, a single request.
    const again = await invoke(fn, { n: 4 });
    assert.equal(again.status, 200);
    assert.equal(again.body.echo.n, 4);
  });

  test('a version not in a deployable status is skipped once and not retried', async () => {
    const fn = await deploy({ ...echoBody }, { minInstances: 1, maxInstances: 2 });
    await watch(fn, (entry) => entry.instances.running === 1);
    assert.equal((await invoke(fn, {})).status, 200);
    await watch(fn, (entry) => entry.reason !== 'not-active');
    const rejected = () => svc.metricsText().then((text) => metricValue(text, 'svc_autoscaler_requests_rejected_total', { reason: 'not_deployable' }));
    const before = await rejected();

    const removed = await svc.api('DELETE', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token });
    assert.equal(removed.status, 200);
    const skippedLog = () => svc.logs.filter((line) => line.includes('not deployable') && line.includes(fn.versionId)).length;
    const deadline = Date.now() + 10_000;
    while (skippedLog() === 0 && Date.now() < deadline) await sleep(50);
    const rounds = () => svc.metricsText().then((text) => metricValue(text, 'svc_autoscaler_scaling_round_duration_seconds_count'));
    const start = await rounds();
    while (await rounds() < start + 5) await sleep(100);
    assert.equal(skippedLog(), 1, 'skipped once');
    assert.equal(await rejected(), before + 1, 'and not retried in the rounds after');
  });

  test('the deployment path refusing desired counts shows in platform API metrics and stops the round', async () => {
    const fn = await deploy({ ...slowBody }, { minInstances: 1, maxInstances: 3, ...burstyPolicy });
    await watch(fn, (entry) => entry.instances.running === 1);
    // The store refuses writes of desired counts, as a failing platform API would.
    const file = new SQLite(path.join(svc.database.dataDir, 'svc.db'));
    file.pragma('busy_timeout = 5000');
    file.exec(`create trigger refuse_insert before insert on autoscaler_desired begin select raise(abort, 'refused'); end;
               create trigger refuse_update before update on autoscaler_desired begin select raise(abort, 'refused'); end;`);
    try {
      const burst = Array.from({ length: 6 }, () => invoke(fn, { seconds: 1 }));
      const errors = () => svc.metricsText().then((text) => metricValue(text, 'svc_autoscaler_platform_api_request_duration_milliseconds_count', { operation: 'set_desired_instances', status: 'error' }));
      const deadline = Date.now() + 10_000;
      while (await errors() < 3 && Date.now() < deadline) await sleep(50);
      assert.ok(await errors() >= 3, 'refused rounds are timed with status error');
      const stuck = await scaling(fn);
      assert.equal(stuck.desiredInstances, 1, 'no decision was applied');
      assert.equal(stuck.instances.running + stuck.instances.starting, 1);
      const text = await svc.metricsText();
      assert.ok(metricValue(text, 'svc_autoscaler_requests_rejected_total', { reason: 'platform_api_error' }) >= 3);

      file.exec('drop trigger refuse_insert; drop trigger refuse_update;');
      const logged = svc.logs.length;
      await watch(fn, (entry) => entry.desiredInstances > 1);
      // The round that raised the count was a scale-up (a later round may already hold at the new count).
      const decisions = svc.logs.slice(logged).filter((line) => line.includes('scaling decision') && line.includes(fn.versionId));
      assert.ok(decisions.some((line) => JSON.parse(line).reason === 'scale-up'), `a scale-up decision: ${decisions.join(' | ')}`);
      assert.deepEqual((await Promise.all(burst)).map((response) => response.status), Array(6).fill(200));
    } finally {
      file.close();
    }
  });

  test('svc autoscaler status: instances, desired count and why, per version', async () => {
    const fn = await deploy({ ...echoBody }, { minInstances: 1, maxInstances: 2 });
    await watch(fn, (entry) => entry.instances.running === 1 && entry.reason === 'hold');
    const printed: { human: string; data: any }[] = [];
    const context: CommandContext = {
      values: { json: false }, positionals: [], env: {},
      state: { server: svc.url, gatewayAddress: 'localhost', apiKey: key },
      print: (human, data) => printed.push({ human, data }),
    };
    await autoscalerCommands['autoscaler status'].run(context);
    const [header, ...lines] = printed[0].human.split('\n');
    assert.match(header, /^NAME\s+VERSIONID\s+STATUS\s+INSTANCES\s+DESIRED\s+BOUNDS\s+POLICY\s+REASON\s+WHY/);
    const line = lines.find((candidate) => candidate.includes(fn.versionId));
    assert.ok(line, printed[0].human);
    assert.match(line, /ACTIVE\s+1\s+1\s+1-2\s+PLATFORM\s+hold\s+utilization 0% below 25%, at minInstances 1/);
    const entry = printed[0].data.functions.find((candidate: any) => candidate.functionVersionId === fn.versionId);
    assert.deepEqual([entry.instances, entry.desiredInstances], [{ running: 1, starting: 0 }, 1]);
  });
});
