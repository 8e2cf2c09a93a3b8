// bench/runtime: the runtimes side by side in one run, on the echo sample: instance start → first
// healthy check (the process runtime spawning `node echo.ts` bare and in its sandbox, the docker runtime
// creating and starting localhost/svc/echo on podman through its Docker API), then requests at
// concurrency 1 and 32 straight to each instance's endpoint (a child process's port, a sandbox's own
// address, a container's published port), and through the gateway (pexec on a `svc serve` per runtime,
// gateway.ts), with what the gateway adds to the direct p50. The sandbox's cost is its rows against the
// bare process runtime's; a container's hardening (a user namespace of its own, its account's network
// behind the agent's firewall) is the docker row against the one on the engine's defaults. Needs podman and `npm run images`, and root with bubblewrap and nftables for
// the sandbox. Where the platform spends its share of an invocation: bench/invoke.
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { DEFAULT_PROBE_SETTINGS, healthTarget, waitUntilHealthy } from '../../api/src/compute/health.ts';
import { prepareInstance } from '../../api/src/compute/instance-env.ts';
import type { InstanceSpec } from '../../api/src/compute/protocol.ts';
import type { Runtime, RuntimeInstance } from '../../api/src/compute/runtime.ts';
import { createDockerRuntime } from '../../api/src/compute/runtimes/docker.ts';
import { createProcessRuntime } from '../../api/src/compute/runtimes/process.ts';
import { agentSettingsSchema } from '../../api/src/compute/settings.ts';
import { createRuntime } from '../../api/src/compute/worker.ts';
import { captureLog, instanceSpec, SAMPLES_CATALOG, tempDir } from '../../api/test/compute/helpers.ts';
import { image, removeContainers, startEngine } from '../../api/test/helpers/podman.ts';
import { load, type LoadResult, type LoadTarget } from '../lib/load.ts';
import { median, percentile, printTable } from '../lib/report.ts';
import { serveEcho } from './gateway.ts';

const STARTS = Number(process.env.BENCH_STARTS ?? 10);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const BODY = JSON.stringify({ message: 'hello', n: 42 });
const AGENT = `bench-runtime-${process.pid}`;
const CONCURRENCIES = [1, 32];

const { log } = captureLog();
const state = await tempDir('bench-runtime');
const engine = await startEngine();
const sandboxed = await createRuntime({
  settings: agentSettingsSchema.parse({ imageCatalog: SAMPLES_CATALOG, sandbox: 'on' }), dataDir: state.dir, declaredGpus: [], log,
}, path.join(state.dir, 'sandboxed'), log);
const runtimes: Record<string, { runtime: Runtime; image: string }> = {
  process: { runtime: createProcessRuntime({ catalogFile: SAMPLES_CATALOG, stateDir: state.dir, log }), image: 'local/echo:1' },
  'process, sandboxed': { runtime: sandboxed.runtime, image: 'local/echo:1' },
  'docker, engine defaults': {
    runtime: createDockerRuntime({ socketPath: engine.socketPath, agentName: `${AGENT}-plain`, userns: 'engine', network: 'engine', log }), image: image('echo'),
  },
  'docker (podman)': { runtime: createDockerRuntime({ socketPath: engine.socketPath, agentName: AGENT, log }), image: image('echo') },
};

async function start(runtime: Runtime, spec: InstanceSpec): Promise<{ instance: RuntimeInstance; ms: number }> {
  const workDir = path.join(state.dir, 'instances', spec.instanceId);
  await mkdir(workDir, { recursive: true });
  const { env } = await prepareInstance(spec, workDir);
  const began = performance.now();
  const instance = await runtime.start(spec, { workDir, env, log });
  const result = await waitUntilHealthy(healthTarget(spec.health, instance.endpoint), 60_000, { ...DEFAULT_PROBE_SETTINGS, startupIntervalMs: 10 }, new AbortController().signal);
  if (result.outcome !== 'healthy') throw new Error(`${spec.containerImage} never became healthy: ${JSON.stringify(result)}`);
  return { instance, ms: performance.now() - began };
}

try {
  const startRows: (string | number)[][] = [];
  const medians: Record<string, number> = {};
  for (const [name, { runtime, image: reference }] of Object.entries(runtimes)) {
    const times: number[] = [];
    for (let n = 0; n < STARTS; n++) {
      const { instance, ms } = await start(runtime, instanceSpec(reference, { inferenceUrl: '/echo' }));
      times.push(ms);
      await instance.stop(5000);
    }
    const sorted = [...times].sort((a, b) => a - b);
    medians[name] = median(times);
    startRows.push([name, medians[name], percentile(sorted, 90), sorted.at(-1)!, medians[name] / medians.process]);
  }
  printTable(`bench/runtime: instance start → healthy, ${STARTS} starts each (echo sample; health probed every 10 ms)`,
    ['runtime', 'p50 ms', 'p90 ms', 'max ms', '× process'], startRows);

  const instances = await Promise.all(Object.entries(runtimes).map(async ([name, { runtime, image: reference }]) =>
    [name, (await start(runtime, instanceSpec(reference, { inferenceUrl: '/echo' }))).instance] as const));
  let direct: Map<string, LoadResult>;
  try {
    direct = await measure(Object.fromEntries(instances.map(([name, instance]) =>
      [name, { origin: `http://${instance.endpoint.host}:${instance.endpoint.ports.inference}`, path: '/echo', headers: { 'content-type': 'application/json' } }])));
  } finally {
    await Promise.all(instances.map(([, instance]) => instance.stop(5000)));
  }
  printTable(`bench/runtime: POST /echo straight to the instance, ${SECONDS} s per row, closed-loop clients (node ${process.version})`,
    ['concurrency  runtime', 'req/s', 'p50 ms', 'p99 ms', '× process', '+p50 ms', 'errors'], rows(direct));

  const served = [await serveEcho('local/echo:1')];
  let gateway: Map<string, LoadResult>;
  try {
    served.push(
      await serveEcho('local/echo:1', undefined, { SVC_AGENT_SANDBOX: 'on' }),
      await serveEcho(image('echo'), engine, { SVC_AGENT_DOCKER_USERNS: 'engine', SVC_AGENT_DOCKER_NETWORK: 'engine' }),
      await serveEcho(image('echo'), engine),
    );
    gateway = await measure(Object.fromEntries(Object.keys(runtimes).map((name, index) => [name, served[index].target])));
  } finally {
    await Promise.all(served.map((platform) => platform.stop()));
  }
  printTable(`bench/runtime: POST /v2/svc/pexec through svc serve (own process, SQLite) to the instance, ${SECONDS} s per row`,
    ['concurrency  runtime', 'req/s', 'p50 ms', 'p99 ms', '× process', '+p50 ms', 'errors', 'gateway +p50 ms'], rows(gateway, direct));
} finally {
  for (const agent of [AGENT, `${AGENT}-plain`]) await removeContainers(engine, `svc.agent=${agent}`);
  for (const { runtime } of Object.values(runtimes)) await runtime.close?.();
  await engine.close();
  await state.remove();
}

/** Each target loaded at each concurrency, one after the other; keyed `c=<concurrency>  <name>`. */
async function measure(targets: Record<string, LoadTarget>): Promise<Map<string, LoadResult>> {
  const results = new Map<string, LoadResult>();
  for (const concurrency of CONCURRENCIES) {
    for (const [name, target] of Object.entries(targets)) {
      const withBody = { ...target, body: BODY };
      await load(withBody, concurrency, 1);
      results.set(`c=${concurrency}  ${name}`, await load(withBody, concurrency, SECONDS));
    }
  }
  return results;
}

/** Table rows, each compared with the process runtime's at the same concurrency (and with `direct`'s p50 when given). */
function rows(results: Map<string, LoadResult>, direct?: Map<string, LoadResult>): (string | number)[][] {
  return [...results].map(([key, result]) => {
    const baseline = results.get(key.replace(/  .*$/, '  process'))!;
    return [key, result.requestsPerSecond, result.p50, result.p99, result.requestsPerSecond / baseline.requestsPerSecond,
      result.p50 - baseline.p50, result.errors, ...(direct ? [result.p50 - direct.get(key)!.p50] : [])];
  });
}
