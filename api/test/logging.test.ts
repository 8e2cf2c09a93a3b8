// The platform's log as an operator reads it: lines reach the file as they happen (not in 4 KiB
// chunks), and a crashed instance's last lines of output are in it, its secrets redacted.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { echoBody } from './helpers/fixtures.ts';
import { deploy } from './helpers/functions.ts';
import { request } from './helpers/http.ts';
import { startTestPlatform } from './helpers/platform.ts';
import { servePlatform } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

test('a request is in the log file of svc serve while the platform idles, not when 4 KiB have gathered', async (t) => {
  const served = await servePlatform({ SVC_TURN_SERVER: 'none' });
  t.after(() => served.stop());
  const response = await request(served.url, 'GET', '/admin/health/liveness');
  const requestId = String(response.headers['x-request-id']);
  await until('the request line in the log file', async () => readFileSync(`${served.dataDir}/output.log`, 'utf8').includes(requestId));
});

test("an instance that crashes leaves its last lines of output in the platform log, its secrets redacted", async (t) => {
  const svc = await startTestPlatform();
  t.after(() => svc.close());
  const token = await svc.token();
  const secret = 'tok-3f9a77c1-never-logged';
  const fn = await deploy(svc, token, echoBody({
    name: undefined, containerImage: 'test/counter:1', inferenceUrl: '/crash', secrets: [{ name: 'API_TOKEN', value: secret }],
    health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 },
  }));
  const key = await svc.apiKey(token, ['invoke_function']);
  await until('the instance to take the request that crashes it', async () =>
    (await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, headers: { 'svc-poll-seconds': '1' }, body: {} })).status !== 503);
  const crash = await until('the crash in the platform log', async () =>
    svc.logs.map((line) => JSON.parse(line)).find((line) => line.msg === 'instance RESTARTING' && line.lastOutput));
  assert.equal(crash.level, 40);
  assert.equal(crash.exitCode, 1);
  assert.ok(crash.lastOutput.includes('counter: crashing as asked (API_TOKEN is [redacted])'), JSON.stringify(crash.lastOutput));
  assert.ok(!svc.logs.join('\n').includes(secret));
});
