// The docker runtime against a real engine: podman's Docker-compatible API (helpers/podman.ts) running the
// project's images (npm run images). Containers are created, started, published, health-checked, invoked,
// stopped and removed for real; exit codes and logs come from real processes; pulls go through the engine
// to a registry (a stand-in: none is reachable here) that checks the credential the engine presents.
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DEFAULT_PROBE_SETTINGS, healthTarget, waitUntilHealthy } from '../../src/compute/health.ts';
import { outputDirOf, prepareInstance } from '../../src/compute/instance-env.ts';
import type { InstanceSpec } from '../../src/compute/protocol.ts';
import { UnstartableError, type RuntimeInstance } from '../../src/compute/runtime.ts';
import { createDockerRuntime, type DockerRuntimeOptions } from '../../src/compute/runtimes/docker.ts';
import { containersLabelled, image, needsPodman, removeContainers, startEngine, type Engine } from '../helpers/podman.ts';
import { RegistryStandIn } from './fixtures/registry.ts';
import { captureLog, eventually, freeUdpRange, instanceSpec, postJson, streamingSpec, tempDir } from './helpers.ts';

const skip = needsPodman([image('echo'), image('slow'), image('streaming-app')], 'the docker runtime against podman');
const AGENT = `podman-test-${process.pid}`;

describe('docker runtime on podman', { skip }, () => {
  const { log } = captureLog();
  const registry = new RegistryStandIn('robot', 'pull-secret');
  let engine: Engine;
  let state: Awaited<ReturnType<typeof tempDir>>;
  let udpPool: [number, number];
  const started: RuntimeInstance[] = [];

  const runtime = (options: Partial<DockerRuntimeOptions> = {}) => createDockerRuntime({
    socketPath: engine.socketPath, agentName: AGENT, udpPortRange: udpPool, udpPortsPerInstance: 4, log, ...options,
  });

  async function start(spec: InstanceSpec, options: Partial<DockerRuntimeOptions> = {}) {
    const workDir = path.join(state.dir, 'instances', spec.instanceId);
    await mkdir(workDir, { recursive: true });
    const { env } = await prepareInstance(spec, workDir);
    const instance = await runtime(options).start(spec, { workDir, env, log });
    started.push(instance);
    return { instance, workDir, url: `http://${instance.endpoint.host}:${instance.endpoint.ports.inference}` };
  }

  async function healthy(spec: InstanceSpec, instance: RuntimeInstance) {
    const result = await waitUntilHealthy(healthTarget(spec.health, instance.endpoint), 30_000, DEFAULT_PROBE_SETTINGS, new AbortController().signal);
    assert.equal(result.outcome, 'healthy', `${spec.containerImage} became healthy: ${JSON.stringify(result)}`);
  }

  const containerOf = async (spec: InstanceSpec) =>
    (await containersLabelled(engine, `svc.instance=${spec.instanceId}`))[0] as { Id: string } | undefined;

  before(async () => {
    await registry.listen();
    engine = await startEngine({ insecureRegistries: [registry.host] });
    state = await tempDir('podman');
    udpPool = await freeUdpRange(4);
  });

  after(async () => {
    await Promise.all(started.map((instance) => instance.stop(1000)));
    if (engine) await removeContainers(engine, `svc.agent=${AGENT}`);
    await engine?.close();
    await registry.close();
    await state?.remove();
  });

  test('an HTTP function: created with the port contract, published on an ephemeral host port, healthy, invoked; stop ends it and removes it', async () => {
    const spec = instanceSpec(image('echo'), {
      inferenceUrl: '/echo',
      containerEnvironment: [{ key: 'MODE', value: 'fast' }],
      secrets: [{ name: 'API_KEY', value: 'sk-123' }],
    });
    const { instance, url, workDir } = await start(spec);
    await healthy(spec, instance);
    assert.notEqual(instance.endpoint.ports.inference, 8000, 'an ephemeral host port, not the container port');

    const container = await containerOf(spec);
    assert.ok(container, 'labelled with its instance id');
    const inspect = (await engine.call('GET', `/containers/${container.Id}/json`)).body;
    for (const entry of ['PORT=8000', 'INFERENCE_PORT=8000', 'HEALTH_PORT=8000', 'MODE=fast', 'API_KEY=sk-123', `SVC_INSTANCE_ID=${spec.instanceId}`]) {
      assert.ok(inspect.Config.Env.includes(entry), `Env has ${entry}`);
    }
    assert.equal(inspect.Config.Labels['svc.agent'], AGENT);
    assert.equal(inspect.Config.User, 'node', "the image's own non-root user");
    assert.ok(inspect.Mounts.some((mount: any) => mount.Source === workDir && mount.Destination === workDir), 'the work dir at the same path');

    const echoed = await postJson(`${url}/echo`, { hello: 'container' }, { 'svc-reqid': 'r-1' });
    assert.equal(echoed.status, 200);
    assert.deepEqual(echoed.body.echo, { hello: 'container' });

    await instance.stop(5000);
    assert.deepEqual(await instance.exited, { code: 0, signal: null }, 'SIGTERM: the sample finishes and exits 0');
    assert.equal((await engine.call('GET', `/containers/${container.Id}/json`)).status, 404, 'removed once ended');
  });

  test("exit codes and logs: a container that fails reports its code and its last lines", async () => {
    const spec = instanceSpec(image('echo'), {
      containerArgs: `node -e "console.log('loading model'); console.error('out of memory'); process.exit(3)"`,
    });
    const { instance } = await start(spec);
    assert.deepEqual(await instance.exited, { code: 3, signal: null });
    await eventually(() => (instance.logTail().length === 2 ? true : undefined), 'both lines in the log tail');
    assert.deepEqual(instance.logTail(), ['loading model', 'out of memory']);
    assert.equal(await containerOf(spec), undefined, 'removed');
  });

  test('a container that ignores SIGTERM is killed after the grace period (exit 137)', async () => {
    const spec = instanceSpec(image('echo'));
    // Armed is told by a file in the shared work dir, not a log line: podman's log follow can miss a line.
    const armed = path.join(outputDirOf(path.join(state.dir, 'instances', spec.instanceId)), 'armed');
    spec.containerArgs = `node -e "process.on('SIGTERM', () => console.log('ignored')); require('fs').writeFileSync('${armed}', ''); setInterval(() => {}, 1000)"`;
    const { instance } = await start(spec);
    await eventually(() => (existsSync(armed) ? true : undefined), 'the SIGTERM handler in place');
    await instance.stop(1000);
    const status = await instance.exited;
    assert.equal(status.code, 137, 'SIGKILL after the grace period');
  });

  test('the work dir is shared: the container (user node) writes progress into its request directory, the agent reads it', async () => {
    const spec = instanceSpec(image('slow'), { inferenceUrl: '/slow' });
    const { instance, url } = await start(spec);
    await healthy(spec, instance);
    const requestDir = path.join(instance.endpoint.outputDir!, 'req-1');
    const answer = await postJson(`${url}/slow`, { seconds: 0.4 }, { 'svc-reqid': 'req-1', 'svc-large-output-dir': requestDir });
    assert.deepEqual(answer.body, { done: true, seconds: 0.4 });
    const progress = JSON.parse(await readFile(path.join(requestDir, 'progress'), 'utf8'));
    assert.deepEqual(progress, { id: 'req-1', progress: 100, partialResponse: { step: 2 } });
  });

  test('STREAMING: control and signaling ports published, the UDP block 1:1; the app inside is ready', async () => {
    const spec = streamingSpec(image('streaming-app'), { containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '320x180' }] });
    const { instance } = await start(spec);
    await healthy(spec, instance);
    const { ports } = instance.endpoint;
    assert.deepEqual(ports.udpRange, udpPool);
    const container = (await containerOf(spec))!;
    const published = (await engine.call('GET', `/containers/${container.Id}/json`)).body.NetworkSettings.Ports;
    for (let port = udpPool[0]; port <= udpPool[1]; port++) {
      assert.equal(published[`${port}/udp`]?.[0]?.HostPort, String(port), `${port}/udp published as itself`);
    }
    assert.equal(Number(published['8011/tcp'][0].HostPort), ports.control);
    assert.equal(Number(published['49100/tcp'][0].HostPort), ports.streaming);
    const ready = await fetch(`http://127.0.0.1:${ports.control}/v1/streaming/ready`);
    assert.equal(ready.status, 200);
    await instance.stop(5000);
    assert.equal((await instance.exited).code, 0, 'SIGTERM before a session: exits 0');
  });

  test('a UDP port of the pool held by another process: the block is skipped, and a pool with no free block is a clear error', async () => {
    const holder = dgram.createSocket('udp4');
    await new Promise<void>((resolve) => holder.bind(udpPool[0] + 1, '0.0.0.0', resolve));
    try {
      await assert.rejects(start(streamingSpec(image('streaming-app'))), (error: Error) =>
        !(error instanceof UnstartableError) && /UDP port pool .* is exhausted/.test(error.message));
    } finally {
      holder.close();
    }
  });

  test('pulls go through the engine with the registry credential; a missing image or a refused credential cannot start, with the engine\'s reason', async () => {
    const secret = (password: string) => Buffer.from(`robot:${password}`).toString('base64');
    const missing = instanceSpec(`${registry.host}/team/app:1`, { registryAuth: { hostname: registry.host, secret: secret('pull-secret') } });
    await assert.rejects(start(missing), (error: Error) => error instanceof UnstartableError && /manifest unknown/.test(error.message));
    assert.ok(registry.authorizations.includes(`Basic ${Buffer.from('robot:pull-secret').toString('base64')}`), 'the credential reached the registry');

    const refused = instanceSpec(`${registry.host}/team/app:1`, { registryAuth: { hostname: registry.host, secret: secret('wrong') } });
    await assert.rejects(start(refused), (error: Error) => error instanceof UnstartableError && /unauthorized/.test(error.message));
  });

  test('an image the engine does not have, with pulls off, cannot start; an engine that is down is a clear, retryable error', async () => {
    await assert.rejects(start(instanceSpec('localhost/svc/no-such-image:1'), { pull: 'never' }), (error: Error) =>
      error instanceof UnstartableError && /not on this host/.test(error.message));
    await assert.rejects(start(instanceSpec(image('echo')), { socketPath: path.join(state.dir, 'no-engine.sock') }), (error: Error) =>
      !(error instanceof UnstartableError) && /container engine at .*no-engine\.sock is not answering/.test(error.message));
  });

  test("cleanup() removes the containers an earlier run of this agent left, and no others", async () => {
    const mine = instanceSpec(image('echo'));
    const theirs = instanceSpec(image('echo'));
    await start(mine);
    const other = await start(theirs, { agentName: `${AGENT}-other` });
    await runtime().cleanup!();
    assert.equal(await containerOf(mine), undefined);
    assert.ok(await containerOf(theirs), "another agent's container stays");
    await other.instance.stop(1000);
  });
});
