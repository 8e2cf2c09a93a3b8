// bench/invoke/telemetry.ts: what telemetry export costs a request. One platform, two deployments of the
// echo sample side by side: one names no telemetry (export off), the other names a telemetry for traces
// and metrics whose endpoint is down (a closed port: every export fails, what would go there is dropped and
// counted). With BENCH_TELEMETRY_UP=1 a third, whose endpoint answers 200 to every export (a collector
// that takes everything), shows the cost when export works. Rows are measured in rounds, each in turn,
// medians reported, with the platform's CPU per request. Last, in this process, what the request path's
// call (TelemetryExport.recordInvocation) costs for a version that names no telemetry and for one whose
// endpoint is known down: on a shared machine the rows drift more than the whole of that.
// Target: export on to a down endpoint ≥ 0.95× export off, at every concurrency.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../api/src/logger.ts';
import { TelemetryExport } from '../../api/src/telemetry/export.ts';
import { telemetrySettingsSchema } from '../../api/src/telemetry/settings.ts';
import { request } from '../../api/test/helpers/http.ts';
import { servePlatform } from '../../api/test/helpers/served.ts';
import { freePort } from '../../api/test/helpers/wait.ts';
import { load, type LoadTarget } from '../lib/load.ts';
import { median, printTable } from '../lib/report.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const LEVELS = (process.env.BENCH_LEVELS ?? '1,32').split(',').map(Number);
const UP = process.env.BENCH_TELEMETRY_UP === '1';
const BODY = JSON.stringify({ message: 'hello', n: 42 });

/** CPU (user + system, µs) a process has used so far (clock ticks of 10 ms). */
function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** A collector that takes everything: 200 to every POST, in its own process. */
async function startAcceptingEndpoint(): Promise<{ url: string; process: ChildProcess }> {
  const port = await freePort();
  const source = `require('node:http').createServer((req, res) => { req.resume(); req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()); }).listen(${port}, '127.0.0.1');`;
  const child = spawn(process.execPath, ['-e', source], { stdio: 'inherit' });
  await sleep(300);
  return { url: `http://127.0.0.1:${port}`, process: child };
}

/** ns per recordInvocation call: a version naming no telemetry, and one whose only telemetry is known down. */
async function requestPathCost(): Promise<{ off: number; down: number }> {
  const closedPort = await freePort();
  const exporter = new TelemetryExport({
    log: createLogger('silent'), settings: telemetrySettingsSchema.parse({ timeoutMs: 500 }),
    sources: {
      owner: async (id) => ({ ncaId: 'bench', attributes: {}, secrets: [], telemetries: id === 'down' ? { tracesTelemetryId: 't', metricsTelemetryId: 't' } : {} }),
      targets: async () => [{ telemetryId: 't', endpoint: `http://127.0.0.1:${closedPort}`, protocol: 'HTTP', provider: 'SPLUNK', types: ['TRACES', 'METRICS'], secret: 'x' }],
    },
  });
  const refs = { off: { ncaId: 'bench', functionId: 'f', versionId: 'off' }, down: { ncaId: 'bench', functionId: 'f', versionId: 'down' } };
  exporter.recordInvocation(refs.down, 'first', 200, 0.001);
  exporter.recordInvocation(refs.off, 'first', 200, 0.001);
  await exporter.flush();
  // The first batch's export fails (connection refused, then the exporter's retries within timeoutMs): known down.
  await sleep(2000);
  const perCall = (ref: typeof refs.off) => {
    const calls = 2_000_000;
    const started = process.hrtime.bigint();
    for (let call = 0; call < calls; call++) exporter.recordInvocation(ref, 'r', 200, 0.001);
    return Number(process.hrtime.bigint() - started) / calls;
  };
  const off: number[] = [];
  const down: number[] = [];
  for (let round = 0; round < 5; round++) {
    off.push(perCall(refs.off));
    down.push(perCall(refs.down));
  }
  await exporter.close();
  return { off: median(off), down: median(down) };
}

const platform = await servePlatform({ SVC_LOG_LEVEL: 'warn', SVC_TELEMETRY_ALLOW_INTERNAL_ENDPOINTS: 'true' });
let accepting: Awaited<ReturnType<typeof startAcceptingEndpoint>> | undefined;
try {
  const credentials = await platform.credentials(['invoke_function', 'list_functions']);
  const api = async (method: string, route: string, body?: unknown) => {
    const response = await request(platform.url, method, route, { host: 'api.localhost', bearer: credentials.token, body });
    if (response.status !== 200) throw new Error(`${method} ${route}: ${response.status} ${response.text}`);
    return response.body;
  };
  const telemetry = async (name: string, endpoint: string) => (await api('POST', '/v2/svc/telemetries', {
    name, endpoint, protocol: 'HTTP', provider: 'GRAFANA_CLOUD', types: ['METRICS', 'TRACES'], secret: { name: 'token', value: 'bench-token' },
  })).telemetry.telemetryId as string;
  const deployEcho = async (name: string, telemetryId?: string): Promise<LoadTarget> => {
    const fn = (await api('POST', '/v2/svc/functions', {
      name, containerImage: 'local/echo:1', inferenceUrl: '/echo', inferencePort: 8000, containerEnvironment: [{ key: 'ECHO_HEADERS', value: 'false' }],
      health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT5S', expectedStatusCode: 200 },
      ...(telemetryId ? { telemetries: { tracesTelemetryId: telemetryId, metricsTelemetryId: telemetryId } } : {}),
    })).function;
    await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 1024 }],
    });
    while ((await api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`)).function.status !== 'ACTIVE') await sleep(100);
    return {
      origin: platform.url.replace('localhost', '127.0.0.1'), path: `/v2/svc/pexec/functions/${fn.id}`, body: BODY,
      headers: { 'content-type': 'application/json', host: 'api.localhost', authorization: `Bearer ${credentials.apiKey}` },
    };
  };

  const targets: Record<string, LoadTarget> = {
    'export off (no telemetry)': await deployEcho('bench-off'),
    'export on, endpoint down': await deployEcho('bench-down', await telemetry('down', `http://127.0.0.1:${await freePort()}`)),
  };
  if (UP) {
    accepting = await startAcceptingEndpoint();
    targets['export on, endpoint up'] = await deployEcho('bench-up', await telemetry('up', accepting.url));
  }
  for (const target of Object.values(targets)) await load(target, 8, 1);

  const pid = platform.process.pid!;
  const rows: (string | number)[][] = [];
  const summary: string[] = [];
  for (const concurrency of LEVELS) {
    const rounds: Record<string, { requestsPerSecond: number; p50: number; p99: number; errors: number; cpu: number }[]> = {};
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, target] of Object.entries(targets)) {
        const before = cpuMicros(pid);
        const result = await load(target, concurrency, SECONDS);
        (rounds[name] ??= []).push({ ...result, cpu: (cpuMicros(pid) - before) / (result.requestsPerSecond * SECONDS) });
      }
    }
    const medians = Object.fromEntries(Object.entries(rounds).map(([name, measured]) => [name, {
      requestsPerSecond: median(measured.map((item) => item.requestsPerSecond)), p50: median(measured.map((item) => item.p50)),
      p99: median(measured.map((item) => item.p99)), cpu: median(measured.map((item) => item.cpu)), errors: measured.reduce((sum, item) => sum + item.errors, 0),
    }]));
    const off = medians['export off (no telemetry)'];
    for (const [name, result] of Object.entries(medians)) {
      rows.push([`c=${concurrency}  ${name}`, result.requestsPerSecond, result.p50, result.p99, result.requestsPerSecond / off.requestsPerSecond, Math.round(result.cpu), result.errors]);
    }
    const perRound = rounds['export on, endpoint down'].map((down, round) => (down.requestsPerSecond / rounds['export off (no telemetry)'][round].requestsPerSecond).toFixed(2));
    summary.push(`c=${concurrency}: export on to a down endpoint ${(medians['export on, endpoint down'].requestsPerSecond / off.requestsPerSecond).toFixed(2)}× export off (rounds ${perRound.join(', ')})`);
  }
  printTable(`bench/invoke/telemetry: medians of ${ROUNDS} rounds of ${SECONDS} s per row, echo sample, one platform (node ${process.version})`,
    ['concurrency  path', 'req/s', 'p50 ms', 'p99 ms', '× off', 'CPU µs/req', 'errors'], rows);
  console.log(summary.join('\n'));
  const dropped = (await request(platform.url, 'GET', '/metrics', { host: 'api.localhost' })).text.split('\n').filter((line) => line.startsWith('svc_telemetry_'));
  console.log(dropped.join('\n'));
  const cost = await requestPathCost();
  console.log(`request path (recordInvocation, in process): ${cost.off.toFixed(0)} ns per call, no telemetry; ${cost.down.toFixed(0)} ns, endpoint down`);
  console.log('target: export on to a down endpoint ≥ 0.95× export off');
} finally {
  accepting?.process.kill('SIGTERM');
  await platform.stop();
}
