// The agent reconciling desired sets through the real process runtime: report sequences, stopping
// undesired instances, restarts with back-off after a crash or failed health checks, FAILED without
// retries, EXITED without a restart, secrets in env and file but never in logs, progress reports.
// Short back-off, grace and probe settings keep it quick; no assertion depends on wall-clock time.
import assert from 'node:assert/strict';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startAgent, type Agent } from '../../src/compute/agent.ts';
import type { InstanceSpec, ProgressReport } from '../../src/compute/protocol.ts';
import { createProcessRuntime } from '../../src/compute/runtimes/process.ts';
import { captureLog, eventually, FIXTURES_CATALOG, instanceSpec, isAlive, postJson, ReportLog, streamingSpec, tempDir } from './helpers.ts';

describe('agent', () => {
  const captured = captureLog();
  let state: Awaited<ReturnType<typeof tempDir>>;
  let agent: Agent;
  let reports: ReportLog;
  const progress: ProgressReport[] = [];
  let desired: InstanceSpec[] = [];

  /** Adds to (or, with `remove`, takes from) the desired set, as the control plane would: always the whole set. */
  function want(...specs: InstanceSpec[]) {
    desired = [...desired, ...specs];
    agent.applyDesired(desired);
  }
  function unwant(...ids: string[]) {
    desired = desired.filter((spec) => !ids.includes(spec.instanceId));
    agent.applyDesired(desired);
  }
  const endpointOf = (id: string) => {
    const report = agent.reports().find((r) => r.instanceId === id);
    return `http://${report!.endpoint!.host}:${report!.endpoint!.ports.inference}`;
  };

  before(async () => {
    state = await tempDir('agent');
    const runtime = createProcessRuntime({ catalogFile: FIXTURES_CATALOG, stateDir: state.dir, log: captured.log });
    agent = await startAgent({
      runtime, stateDir: state.dir, log: captured.log,
      backoff: { initialMs: 100, maxMs: 400 },
      probe: { startupIntervalMs: 100, intervalMs: 150, failureThreshold: 2 },
      stopGraceMs: 1000,
      progress: { intervalMs: 50 },
    });
    reports = new ReportLog(agent);
    agent.onProgress((report) => progress.push(report));
  });

  after(async () => {
    await agent.stop();
    await state.remove();
  });

  test('starts the desired set, RUNNING after the health check; a re-sent set changes nothing; undesired instances stop', async () => {
    const a = instanceSpec('test/echo:1');
    const b = instanceSpec('test/echo:1', { functionId: a.functionId, functionVersionId: a.functionVersionId });
    want(a, b);
    await reports.waitForState(a.instanceId, 'RUNNING');
    const runningB = await reports.waitForState(b.instanceId, 'RUNNING');
    assert.equal(runningB.endpoint!.host, '127.0.0.1');
    assert.equal(runningB.restarts, 0);
    assert.equal(runningB.functionVersionId, b.functionVersionId);
    const urlA = endpointOf(a.instanceId);
    assert.notEqual(urlA, endpointOf(b.instanceId));
    assert.equal((await postJson(`${urlA}/echo`, { n: 1 })).body.echo.n, 1);

    want(); // the same set again, as after a reconnect
    unwant(a.instanceId);
    await reports.waitForState(a.instanceId, 'STOPPED');
    assert.deepEqual(reports.states(a.instanceId), ['STARTING', 'RUNNING', 'STOPPED'], 'started once, never twice');
    await assert.rejects(fetch(`${urlA}/echo`, { method: 'POST', body: '{}' }), 'its process is gone');
    assert.deepEqual(agent.reports().map((r) => r.instanceId).filter((id) => id === a.instanceId || id === b.instanceId), [b.instanceId]);
    await eventually(() => stat(path.join(state.dir, 'instances', `i-${a.instanceId}`)).then(() => undefined, () => true), 'its work dir to be removed');
    unwant(b.instanceId);
    await reports.waitForState(b.instanceId, 'STOPPED');
  });

  test('a killed instance restarts with back-off; restarts count up', async () => {
    const spec = instanceSpec('test/family');
    want(spec);
    await reports.waitForState(spec.instanceId, 'RUNNING');
    for (let round = 1; round <= 2; round++) {
      const family = (await (await fetch(`${endpointOf(spec.instanceId)}/family`)).json()) as { pid: number; child: number };
      process.kill(family.pid, 'SIGKILL');
      const restarting = await reports.waitForState(spec.instanceId, 'RESTARTING', round);
      assert.equal(restarting.restarts, round);
      assert.match(restarting.message!, /^killed by SIGKILL; last output: .*family line 80$/, 'the reason ends with its last lines');
      assert.equal(restarting.exitCode, null);
      assert.ok(restarting.logTail!.includes('family line 80'), 'the report carries the last lines');
      const running = await reports.waitForState(spec.instanceId, 'RUNNING', round + 1);
      assert.equal(running.restarts, round);
      assert.ok(!isAlive(family.child), "the killed instance's child went with it");
    }
    assert.deepEqual(reports.states(spec.instanceId), ['STARTING', 'RUNNING', 'RESTARTING', 'STARTING', 'RUNNING', 'RESTARTING', 'STARTING', 'RUNNING']);
    unwant(spec.instanceId);
    await reports.waitForState(spec.instanceId, 'STOPPED');
  });

  test('an unknown image is FAILED and never retried', async () => {
    const unknown = instanceSpec('test/does-not-exist:2');
    want(unknown);
    const failed = await reports.waitForState(unknown.instanceId, 'FAILED');
    assert.equal(failed.message, `image test/does-not-exist:2 is not in the image catalog ${FIXTURES_CATALOG}`);
    // Several back-off periods pass while another instance starts: still no retry.
    const sentinel = instanceSpec('test/echo');
    want(sentinel);
    await reports.waitForState(sentinel.instanceId, 'RUNNING');
    want();
    await reports.waitForState(sentinel.instanceId, 'RUNNING');
    assert.deepEqual(reports.states(unknown.instanceId), ['STARTING', 'FAILED']);
    assert.equal(agent.reports().find((r) => r.instanceId === unknown.instanceId)?.state, 'FAILED', 'kept while desired');
    unwant(unknown.instanceId, sentinel.instanceId);
    await reports.waitForState(sentinel.instanceId, 'STOPPED');
    assert.deepEqual(reports.states(unknown.instanceId), ['STARTING', 'FAILED'], 'a FAILED instance is dropped without a STOPPED');
  });

  test('exit 0 is EXITED and not restarted; a non-zero exit restarts', async () => {
    const session = instanceSpec('test/exit', { containerEnvironment: [{ key: 'EXIT_AFTER_MS', value: '1500' }] });
    const crash = instanceSpec('test/exit', { containerEnvironment: [{ key: 'EXIT_AFTER_MS', value: '1500' }, { key: 'EXIT_CODE', value: '3' }] });
    want(session, crash);
    const exited = await reports.waitForState(session.instanceId, 'EXITED');
    assert.equal(exited.exitCode, 0);
    const restarting = await reports.waitForState(crash.instanceId, 'RESTARTING');
    assert.equal(restarting.exitCode, 3);
    assert.equal(restarting.message, 'exited with code 3; last output: exit fixture started | exit fixture leaving');
    assert.deepEqual(restarting.logTail, ['exit fixture started', 'exit fixture leaving']);
    await reports.waitForState(crash.instanceId, 'RUNNING', 2);
    assert.deepEqual(reports.states(session.instanceId), ['STARTING', 'RUNNING', 'EXITED']);
    unwant(session.instanceId, crash.instanceId);
    await reports.waitForState(crash.instanceId, 'STOPPED');
  });

  test('a program that stops listening on its way out is EXITED, not declared unhealthy', async () => {
    const leaving = instanceSpec('test/exit', { containerEnvironment: [{ key: 'EXIT_AFTER_MS', value: '1500' }, { key: 'CLOSE_BEFORE_EXIT_MS', value: '800' }] });
    want(leaving);
    await reports.waitForState(leaving.instanceId, 'EXITED');
    assert.deepEqual(reports.states(leaving.instanceId), ['STARTING', 'RUNNING', 'EXITED'], 'its failed checks gave way to the exit');
    unwant(leaving.instanceId);
  });

  test('never healthy within the grace period: restarted with back-off', async () => {
    // Long enough for the fixture to be listening (answering 503) even on a loaded machine.
    const spec = instanceSpec('test/unhealthy', { startupGracePeriodMs: 3000 });
    want(spec);
    const first = await reports.waitForState(spec.instanceId, 'RESTARTING');
    assert.match(first.message!, /^not healthy within its 3 s start-up grace \(last check: GET \/health → 503 \(expected 200\)\); last output: unhealthy fixture started$/);
    const checking = reports.all.find((report) => report.instanceId === spec.instanceId && report.state === 'STARTING' && report.message?.includes('→ 503'));
    assert.match(checking?.message ?? '', /^GET \/health → 503 \(expected 200\), \d+ tr(y|ies), \d+ s of a 3 s grace$/, 'while starting, the last check in words');
    const again = await reports.waitFor((report) => report.instanceId === spec.instanceId && report.state === 'STARTING' && report.restarts === 1, 'the second start');
    assert.match(again.message!, /^restarting after: not healthy within its 3 s start-up grace/);
    assert.equal(first.restarts, 1);
    const second = await reports.waitForState(spec.instanceId, 'RESTARTING', 2);
    assert.equal(second.restarts, 2);
    assert.ok(!reports.states(spec.instanceId).includes('RUNNING'));
    unwant(spec.instanceId);
    await reports.waitForState(spec.instanceId, 'STOPPED');
  });

  test('failing health checks make a RUNNING instance UNHEALTHY, then it restarts', async () => {
    const spec = instanceSpec('test/unhealthy', { containerEnvironment: [{ key: 'HEALTHY_FOR_MS', value: '1200' }] });
    want(spec);
    const unhealthy = await reports.waitForState(spec.instanceId, 'UNHEALTHY');
    assert.equal(unhealthy.message, '2 failed health checks in a row, last: HTTP 503');
    assert.deepEqual(unhealthy.logTail, ['unhealthy fixture started']);
    await reports.waitForState(spec.instanceId, 'RUNNING', 2);
    assert.deepEqual(reports.states(spec.instanceId).slice(0, 6), ['STARTING', 'RUNNING', 'UNHEALTHY', 'RESTARTING', 'STARTING', 'RUNNING']);
    unwant(spec.instanceId);
    await reports.waitForState(spec.instanceId, 'STOPPED');
  });

  test('a RUNNING STREAMING instance whose ready check says 500 (a session in progress) is not restarted', async () => {
    const spec = streamingSpec('test/unhealthy', { containerEnvironment: [{ key: 'HEALTHY_FOR_MS', value: '600' }] });
    want(spec);
    const running = await reports.waitForState(spec.instanceId, 'RUNNING');
    const ready = `http://127.0.0.1:${running.endpoint!.ports.control}/v1/streaming/ready`;
    // Well past failureThreshold × intervalMs of "not ready" answers.
    let notReady = 0;
    while (notReady < 6) {
      if ((await fetch(ready)).status === 503) notReady++;
      await new Promise((resolve) => setTimeout(resolve, 150));
    }
    unwant(spec.instanceId);
    await reports.waitForState(spec.instanceId, 'STOPPED');
    assert.deepEqual(reports.states(spec.instanceId), ['STARTING', 'RUNNING', 'STOPPED']);
  });

  test('secrets reach the instance as environment variables and a 0600 file, and never a log line', async () => {
    const apiKey = 'sk-live-7f3a9c';
    const dbPassword = 'pw-4b1e55';
    const spec = instanceSpec('test/env', {
      secrets: [{ name: 'API_KEY', value: apiKey }, { name: 'db.config', value: { user: 'app', password: dbPassword } }],
    });
    want(spec);
    await reports.waitForState(spec.instanceId, 'RUNNING');
    const seen = (await (await fetch(`${endpointOf(spec.instanceId)}/env`)).json()) as any;
    assert.equal(seen.env.API_KEY, apiKey);
    assert.equal(seen.env['db.config'], undefined, 'not a valid variable name: file only');
    assert.deepEqual(seen.secretsFile, { API_KEY: apiKey, 'db.config': { user: 'app', password: dbPassword } });
    assert.equal((await stat(seen.env.SVC_SECRETS_FILE)).mode & 0o777, 0o600);
    unwant(spec.instanceId);
    await reports.waitForState(spec.instanceId, 'STOPPED');

    const logs = captured.lines.join('\n');
    assert.ok(logs.includes(spec.instanceId), 'the instance was logged, by id');
    for (const secret of [apiKey, dbPassword]) {
      assert.ok(!logs.includes(secret), 'no secret in the agent log');
      assert.ok(!JSON.stringify(reports.all).includes(secret), 'no secret in a report');
    }
  });

  test('progress the slow sample writes becomes progress reports, once per change', async () => {
    const spec = instanceSpec('test/slow');
    want(spec);
    const running = await reports.waitForState(spec.instanceId, 'RUNNING');
    const requestId = 'req-progress-1';
    const answer = await postJson(`${endpointOf(spec.instanceId)}/slow`, { seconds: 1 }, {
      'svc-reqid': requestId, 'svc-large-output-dir': path.join(running.endpoint!.outputDir!, requestId),
    });
    assert.deepEqual(answer.body, { done: true, seconds: 1 });
    const mine = () => progress.filter((p) => p.requestId === requestId);
    for (let i = 0; i < 100 && mine().at(-1)?.percent !== 100; i++) await new Promise((resolve) => setTimeout(resolve, 50));
    const seen = mine();
    assert.deepEqual(seen.at(-1), { requestId, instanceId: spec.instanceId, percent: 100, partialResponse: { step: 5 } });
    const percents = seen.map((p) => p.percent);
    assert.ok(percents.length >= 2, 'progress arrived while the request ran');
    assert.deepEqual(percents, [...new Set(percents)].sort((x, y) => x - y), 'increasing, no repeats');
    unwant(spec.instanceId);
    await reports.waitForState(spec.instanceId, 'STOPPED');
  });
});
