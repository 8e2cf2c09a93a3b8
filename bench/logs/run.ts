// bench/logs: how soon a line an instance writes reaches someone following its logs (issue 28's target:
// within 1 s). The platform in this process with its in-process agent runs test/talker (the process
// runtime); a follower holds GET …/logs?follow=true (what `svc function logs --follow` reads) while the
// talker is invoked LINES times, one at a time, and writes "said: <n> @<ms>" with the time it wrote the
// line. Latency = the event's arrival - that time (one host, one clock): the agent's read of the pipe, its
// kept log, the link, the control plane's relay and the SSE response. No peer runs here (faas-cli, modal
// and the others need their clouds), so the table sets it against the target.
import http from 'node:http';
import { echoBody } from '../../api/test/helpers/fixtures.ts';
import { deploy } from '../../api/test/helpers/functions.ts';
import { startTestPlatform } from '../../api/test/helpers/platform.ts';
import { until } from '../../api/test/helpers/wait.ts';
import { percentile, printTable } from '../lib/report.ts';

const LINES = Number(process.env.BENCH_LINES ?? 100);
const TARGET_MS = 1000;

const svc = await startTestPlatform({ config: { log: { level: 'warn' } } });
try {
  const token = await svc.token();
  const fn = await deploy(svc, token, echoBody({
    name: 'bench-logs', containerImage: 'test/talker:1', inferenceUrl: '/say',
    health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 },
    containerEnvironment: [{ key: 'TALKER_STAMP', value: '1' }],
  }));
  await until('the talker running', async () => (await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token }))
    .body.function.activeInstances.some((instance: { instanceStatus: string }) => instance.instanceStatus === 'RUNNING'), 60_000);
  const key = await svc.apiKey(token, ['invoke_function']);

  const arrivals = new Map<number, number>();
  let caughtUp = false;
  const url = new URL(`/v2/svc/functions/${fn.id}/versions/${fn.versionId}/logs?follow=true&tail=1`, svc.url);
  const follower = http.get(url, { headers: { host: svc.platform.hosts.api, authorization: `Bearer ${token}` } }, (response) => {
    response.setEncoding('utf8');
    response.on('data', (chunk: string) => {
      const now = Date.now();
      if (chunk.includes('event: caught-up')) caughtUp = true;
      for (const match of chunk.matchAll(/said: (\d+) @(\d+)/g)) arrivals.set(Number(match[1]), now - Number(match[2]));
    });
  });
  await until('the follower caught up', async () => caughtUp);

  for (let n = 1; n <= LINES; n++) {
    const answer = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body: { say: String(n) } });
    if (answer.status !== 200) throw new Error(`invocation ${n}: ${answer.status} ${answer.text}`);
    await until(`line ${n} followed`, async () => arrivals.has(n), 10_000);
  }
  follower.destroy();

  const sorted = [...arrivals.values()].sort((a, b) => a - b);
  const p50 = percentile(sorted, 50);
  const p99 = percentile(sorted, 99);
  printTable(`write → follower latency, ${LINES} lines, one at a time (ms)`, ['', 'p50', 'p99', 'max', 'target', 'p99 / target'], [
    ['svc (process runtime, in-process agent)', p50, p99, sorted.at(-1)!, TARGET_MS, p99 / TARGET_MS],
  ]);
} finally {
  await svc.close();
}
