// Owners see what their instances write (issue 28): a real platform with its in-process agent running the
// test/talker fixture as a real process. A crash's last line in the instance's reason; the kept output
// through the API (filtered, secrets redacted, another account 404) and through `svc function logs
// --follow`, which shows a line the instance writes while it follows; the last health check while a
// version deploys, against the start-up grace its deployment sets.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { hasStatus, TASK_KEY_SCOPES, taskBody, waitForTask } from './compute/tasks-fixtures.ts';
import { tempDir } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy, type Deployed } from './helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { until } from './helpers/wait.ts';

const svcBin = path.resolve(import.meta.dirname, '../bin/svc.js');
const SECRET = 'tok-5e1f0c2a-never-served';
const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 };

const talker = (env: Record<string, string> = {}) => echoBody({
  name: undefined, containerImage: 'test/talker:1', inferenceUrl: '/say', health,
  secrets: [{ name: 'API_TOKEN', value: SECRET }],
  containerEnvironment: Object.entries(env).map(([key, value]) => ({ key, value })),
});

describe('logs and reasons', () => {
  let svc: TestPlatform;
  let token: string;

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
  });
  after(() => svc.close());

  const version = async (fn: Deployed) =>
    (await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token })).body.function;
  const otherAccount = async (ncaId: string) => {
    assert.equal((await svc.api('POST', `/v2/svc/accounts/${ncaId}`, { bearer: await svc.adminToken(), body: {} })).status, 200);
    return svc.token({ ncaId });
  };
  const logsPath = (fn: Deployed, query = '') => `/v2/svc/functions/${fn.id}/versions/${fn.versionId}/logs${query}`;

  test('a crashing instance: its last line in its reason; its output kept, secrets redacted, for its own account only', async () => {
    const fn = await deploy(svc, token, talker({ CRASH_WITH: 'model weights not found in /models' }));
    const instance = await until('the crash in activeInstances', async () =>
      (await version(fn)).activeInstances.find((item: { reason?: string }) => item.reason?.includes('exited with code 3')));
    assert.match(instance.reason, /exited with code 3; last output: .*fatal: model weights not found in \/models$/);
    assert.ok(!instance.reason.includes(SECRET));
    const record = await version(fn);
    assert.ok(record.healthInfo?.some((info: { error: string }) => info.error.includes('fatal: model weights not found')), JSON.stringify(record.healthInfo));

    const { SVC_API_KEY: _unused, ...inherited } = process.env;
    const shown = await run(['function', 'get', fn.id, fn.versionId], { ...inherited, SVC_SERVER: svc.url, SVC_TOKEN: token, SVC_STATE_FILE: path.join(tempDir(), 'state.json') });
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /^reason +.*exited with code 3; last output: .*fatal: model weights not found in \/models/m);

    const kept = await svc.api('GET', logsPath(fn), { bearer: token });
    assert.equal(kept.status, 200);
    const lines: { instanceId: string; stream: string; text: string; timestamp: string }[] = kept.body.logs;
    assert.ok(lines.some((line) => line.stream === 'stderr' && line.text === 'fatal: model weights not found in /models'), JSON.stringify(lines));
    assert.ok(lines.some((line) => line.stream === 'stdout' && line.text === 'talker starting with token [redacted]'), JSON.stringify(lines));
    assert.ok(!kept.text.includes(SECRET), 'the secret value is never served');
    assert.ok(lines.every((line) => line.instanceId === instance.instanceId && !Number.isNaN(Date.parse(line.timestamp))));
    assert.deepEqual([...lines].sort((a, b) => a.timestamp.localeCompare(b.timestamp)), lines, 'oldest first');

    const tail = await svc.api('GET', logsPath(fn, '?tail=1'), { bearer: token });
    assert.equal(tail.body.logs.length, 1);
    const future = await svc.api('GET', logsPath(fn, `?since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`), { bearer: token });
    assert.deepEqual(future.body.logs, []);
    const recent = await svc.api('GET', logsPath(fn, '?since=10m&instanceId=' + instance.instanceId), { bearer: token });
    assert.ok(recent.body.logs.length >= 3);
    const elsewhere = await svc.api('GET', logsPath(fn, '?instanceId=not-an-instance-of-it'), { bearer: token });
    assert.deepEqual(elsewhere.body.logs, []);

    const bad = await svc.api('GET', logsPath(fn, '?since=yesterday&tail=0'), { bearer: token });
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.body.errors.map((error: { field: string }) => error.field).sort(), ['query since', 'query tail']);

    const other = await otherAccount('logs-other');
    const foreign = await svc.api('GET', logsPath(fn), { bearer: other });
    assert.equal(foreign.status, 404);
    const followedByOther = await get(svc, logsPath(fn, '?follow=true'), other);
    assert.equal(followedByOther.status, 404);
  });

  test('svc function logs --follow shows a line the instance writes while it follows', async (t) => {
    const fn = await deploy(svc, token, talker());
    await until('the talker running', async () => (await version(fn)).activeInstances.some((item: { instanceStatus: string }) => item.instanceStatus === 'RUNNING'));
    const { SVC_API_KEY: _unused, ...inherited } = process.env;
    const env = { ...inherited, SVC_SERVER: svc.url, SVC_TOKEN: token, SVC_STATE_FILE: path.join(tempDir(), 'state.json') };
    const cli = spawn(process.execPath, [svcBin, 'function', 'logs', fn.id, '--follow'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    t.after(() => cli.kill());
    let output = '';
    let errors = '';
    cli.stdout.setEncoding('utf8').on('data', (chunk: string) => { output += chunk; });
    cli.stderr.setEncoding('utf8').on('data', (chunk: string) => { errors += chunk; });
    await until(`the kept lines printed (stderr: ${errors})`, async () => output.includes('talker starting with token [redacted]'));

    const key = await svc.apiKey(token, ['invoke_function']);
    const marker = `marker-${process.pid}-${Date.now()}`;
    const invoked = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body: { say: marker } });
    assert.equal(invoked.status, 200, invoked.text);
    // The line arrives while the command follows: it was written after the command started.
    await until('the new line printed by the following command', async () => output.includes(`said: ${marker}`), 10_000);
    const printed = output.split('\n').find((line) => line.includes(`said: ${marker}`))!;
    assert.match(printed, /^\d{4}-\d{2}-\d{2}T\S+Z {2}\S{8} {2}stdout {2}said: marker-/);
    assert.ok(!output.includes(SECRET));
    assert.equal(cli.exitCode, null, 'still following');

    const plain = await run(['function', 'logs', fn.id, fn.versionId, '--tail', '1'], env);
    assert.equal(plain.code, 0, plain.stderr);
    assert.match(plain.stdout.trim(), new RegExp(`said: ${marker}$`));
    const other = await run(['function', 'logs', fn.id, fn.versionId], { ...env, SVC_TOKEN: await otherAccount('logs-cli-other') });
    assert.equal(other.code, 1);
    assert.match(other.stderr, /failed \(404\)/);
  });

  test("a task's output: through the API with a task key, redacted, another account 404; and svc task logs", async () => {
    const key = await svc.apiKey(token, TASK_KEY_SCOPES, { task: true });
    const launched = await svc.api('POST', '/v1/svct/tasks', {
      bearer: key, body: taskBody({ name: 'talks', secrets: [{ name: 'API_TOKEN', value: SECRET }] }, { TASK_EXIT_CODE: '3', TASK_ECHO_ENV: 'API_TOKEN' }),
    });
    assert.equal(launched.status, 200, launched.text);
    const id = launched.body.task.id;
    await waitForTask(svc.api, key, id, hasStatus('COMPLETED', 'ERRORED'));
    const kept = await svc.api('GET', `/v1/svct/tasks/${id}/logs`, { bearer: key });
    assert.equal(kept.status, 200);
    const texts = kept.body.logs.map((line: { text: string }) => line.text);
    assert.ok(texts.some((text: string) => /failing on purpose with exit code 3/.test(text)), JSON.stringify(texts));
    assert.ok(texts.some((text: string) => text.includes('API_TOKEN=[redacted]')), JSON.stringify(texts));
    assert.ok(!kept.text.includes(SECRET));
    const otherKey = await svc.apiKey(await otherAccount('logs-task-other'), TASK_KEY_SCOPES, { task: true });
    assert.equal((await svc.api('GET', `/v1/svct/tasks/${id}/logs`, { bearer: otherKey })).status, 404);

    const { SVC_API_KEY: _unused, ...inherited } = process.env;
    const printed = await run(['task', 'logs', id, '--tail', '2'], { ...inherited, SVC_SERVER: svc.url, SVC_TASK_API_KEY: key, SVC_STATE_FILE: path.join(tempDir(), 'state.json') });
    assert.equal(printed.code, 0, printed.stderr);
    assert.equal(printed.stdout.trim().split('\n').length, 2);
  });

  test('while deploying, the reason is the last health check against the grace the deployment sets', async () => {
    const invalid = await svc.api('POST', '/v2/svc/functions', { bearer: token, body: { ...talker(), name: `grace-${process.pid}` } });
    const refused = await svc.api('POST', `/v2/svc/deployments/functions/${invalid.body.function.id}/versions/${invalid.body.function.versionId}`, {
      bearer: token, body: { deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, configuration: { startupGracePeriod: 'ten minutes' } }] },
    });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.errors[0].field, 'deploymentSpecifications.0.configuration.startupGracePeriod');

    const fn = await deploy(svc, token, talker({ HEALTH_STATUS: '404' }), { configuration: { startupGracePeriod: 'PT90S' } });
    const record = await until('the health check in the reason', async () => {
      const current = await version(fn);
      return current.activeInstances[0]?.reason?.includes('tries') ? current : undefined;
    });
    assert.equal(record.status, 'DEPLOYING');
    assert.match(record.activeInstances[0].reason, /^GET \/health → 404 \(expected 200\), \d+ tries, \d+ s of a 90 s grace$/);
    assert.ok(record.healthInfo?.some((info: { error: string }) => /GET \/health → 404/.test(info.error)), JSON.stringify(record.healthInfo));
  });
});

function get(svc: TestPlatform, pathAndQuery: string, bearer: string): Promise<{ status: number }> {
  const url = new URL(pathAndQuery, svc.url);
  return new Promise((resolve, reject) => {
    http.get(url, { headers: { host: svc.platform.hosts.api, authorization: `Bearer ${bearer}` } }, (response) => {
      response.resume();
      resolve({ status: response.statusCode ?? 0 });
      response.destroy();
    }).on('error', reject);
  });
}

function run(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [svcBin, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk; });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk; });
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}
