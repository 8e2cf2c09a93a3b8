// The guards of a long-running process, seen on a real `svc serve` that misbehaves on cue
// (fixtures/misbehave.ts): the heap cap, the watchdog's log line and exit, readiness after a block.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import { test } from 'node:test';
import { request } from './helpers/http.ts';
import { servePlatform, type ServedPlatform } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

const misbehave = new URL('./fixtures/misbehave.ts', import.meta.url).href;

function serveMisbehaving(how: string, env: NodeJS.ProcessEnv = {}) {
  return servePlatform({ SVC_TURN_SERVER: 'none', NODE_OPTIONS: `--import=${misbehave}`, MISBEHAVE: how, ...env });
}

/** The platform's JSON log lines so far (its stdout). */
function logLines(served: ServedPlatform): Record<string, any>[] {
  return readFileSync(`${served.dataDir}/output.log`, 'utf8').split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
}

const readiness = (served: ServedPlatform) => request(served.url, 'GET', '/admin/health/readiness');

test('svc serve runs under the heap cap and without pretenuring, as the same process (no wrapper parent)', async (t) => {
  const served = await servePlatform({ SVC_TURN_SERVER: 'none', SVC_MAX_HEAP_MB: '384' });
  t.after(() => served.stop());
  const commandLine = readFileSync(`/proc/${served.process.pid}/cmdline`, 'utf8').split('\0');
  assert.ok(commandLine.includes('--max-old-space-size=384'), commandLine.join(' '));
  assert.ok(commandLine.includes('--no-allocation-site-pretenuring'), commandLine.join(' '));
});

test('a blocked event loop is logged with where it is stuck, and readiness fails until it has recovered', async (t) => {
  const served = await serveMisbehaving('block:5000', { SVC_EVENT_LOOP_BLOCKED_MS: '300', SVC_EVENT_LOOP_UNREADY_SECONDS: '2' });
  t.after(() => served.stop());
  // Start-up's own synchronous work may count as a block on a busy machine: wait until it has passed.
  await until('readiness', async () => (await readiness(served)).status === 200);
  served.process.kill('SIGUSR2');
  // (Start-up may have logged a block of its own: building the OpenAPI document is synchronous work.)
  const blocked = await until('the watchdog to log the block', async () =>
    logLines(served).find((line) => line.msg === 'event loop blocked' && line.where[0].startsWith('blockTheLoop')));
  assert.equal(blocked.level, 50);
  assert.ok(blocked.blockedMs >= 300);
  assert.match(blocked.where[0], /^blockTheLoop \(file:.*misbehave\.ts:\d+:\d+\)$/, blocked.where.join('\n'));

  const report = await request(served.url, 'GET', '/health');
  assert.equal(report.status, 503);
  assert.match(report.body.components.event_loop.error, /^blocked for \d+ ms/);
  assert.equal((await readiness(served)).status, 503);
  await until('readiness to come back', async () => (await readiness(served)).status === 200);
  assert.ok(logLines(served).some((line) => line.msg === 'event loop running again'));
});

test('a loop blocked past exitAfterSeconds ends the process, with a last line', async (t) => {
  const served = await serveMisbehaving('block:600000', { SVC_EVENT_LOOP_BLOCKED_MS: '300', SVC_EVENT_LOOP_EXIT_AFTER_SECONDS: '10' });
  t.after(() => served.stop());
  const exited = once(served.process, 'exit');
  served.process.kill('SIGUSR2');
  const [, signal] = await exited;
  assert.equal(signal, 'SIGKILL');
  assert.ok(logLines(served).some((line) => line.level === 60 && /exitAfterSeconds/.test(line.msg)));
});

test('resident memory past maxRssMb ends the process, with a last line', async (t) => {
  const served = await serveMisbehaving('grow:32', { SVC_MAX_RSS_MB: '400' });
  t.after(() => served.stop());
  const exited = once(served.process, 'exit');
  served.process.kill('SIGUSR2');
  const [, signal] = await exited;
  assert.equal(signal, 'SIGKILL');
  const last = logLines(served).find((line) => line.level === 60);
  assert.match(last?.msg, /maxRssMb/);
  assert.ok(last!.rssMb > 400);
});
