// bench/runtime: the two runtimes side by side in one run, on the echo sample: instance start → first
// healthy check (the process runtime spawning `node echo.ts`, the docker runtime creating and starting
// localhost/svc/echo on podman through its Docker API), then requests straight to each instance's endpoint
// (a child process's port vs a container's published port) at concurrency 1 and 32. Needs podman and
// `npm run images`. The platform's own share of an invocation is bench/invoke.
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { DEFAULT_PROBE_SETTINGS, healthTarget, waitUntilHealthy } from '../../api/src/compute/health.ts';
import { prepareInstance } from '../../api/src/compute/instance-env.ts';
import type { InstanceSpec } from '../../api/src/compute/protocol.ts';
import type { Runtime, RuntimeInstance } from '../../api/src/compute/runtime.ts';
import { createDockerRuntime } from '../../api/src/compute/runtimes/docker.ts';
import { createProcessRuntime } from '../../api/src/compute/runtimes/process.ts';
import { captureLog, instanceSpec, SAMPLES_CATALOG, tempDir } from '../../api/test/compute/helpers.ts';
import { image, removeContainers, startEngine } from '../../api/test/helpers/podman.ts';
import { load } from '../lib/load.ts';
import { median, percentile, printTable } from '../lib/report.ts';

const STARTS = Number(process.env.BENCH_STARTS ?? 10);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const BODY = JSON.stringify({ message: 'hello', n: 42 });
const AGENT = `bench-runtime-${process.pid}`;

const { log } = captureLog();
const state = await tempDir('bench-runtime');
const engine = await startEngine();
const runtimes: Record<string, { runtime: Runtime; image: string }> = {
  process: { runtime: createProcessRuntime({ catalogFile: SAMPLES_CATALOG, stateDir: state.dir, log }), image: 'local/echo:1' },
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

  const loadRows: (string | number)[][] = [];
  const instances = await Promise.all(Object.entries(runtimes).map(async ([name, { runtime, image: reference }]) =>
    [name, (await start(runtime, instanceSpec(reference, { inferenceUrl: '/echo' }))).instance] as const));
  try {
    for (const concurrency of [1, 32]) {
      const results: Record<string, Awaited<ReturnType<typeof load>>> = {};
      for (const [name, instance] of instances) {
        const target = { origin: `http://127.0.0.1:${instance.endpoint.ports.inference}`, path: '/echo', headers: { 'content-type': 'application/json' }, body: BODY };
        await load(target, concurrency, 1);
        results[name] = await load(target, concurrency, SECONDS);
      }
      for (const [name, result] of Object.entries(results)) {
        loadRows.push([`c=${concurrency}  ${name}`, result.requestsPerSecond, result.p50, result.p99,
          result.requestsPerSecond / results.process.requestsPerSecond, result.p50 - results.process.p50, result.errors]);
      }
    }
  } finally {
    await Promise.all(instances.map(([, instance]) => instance.stop(5000)));
  }
  printTable(`bench/runtime: POST /echo straight to the instance, ${SECONDS} s per row, closed-loop clients (node ${process.version})`,
    ['concurrency  runtime', 'req/s', 'p50 ms', 'p99 ms', '× process', '+p50 ms', 'errors'], loadRows);
} finally {
  await removeContainers(engine, `svc.agent=${AGENT}`);
  await engine.close();
  await state.remove();
}
