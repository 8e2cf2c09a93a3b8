// The docker runtime against a stand-in of Docker's daemon on a unix socket (fixtures/docker-engine.ts):
// the exact Engine API requests (pull auth, env, port bindings, labels, mounts, the sandbox's fields),
// published ports in the endpoint, demultiplexed logs, last lines an engine stores late, exit, an
// out-of-memory kill as dockerd reports it, stop, removal, cleanup, and an agent's bounded starts when the
// engine is gone. Fast and exact about what is sent; the same runtime against a real engine (podman),
// account networks and their firewall included, is docker-podman.test.ts.
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startAgent } from '../../src/compute/agent.ts';
import { prepareInstance } from '../../src/compute/instance-env.ts';
import type { InstanceSpec } from '../../src/compute/protocol.ts';
import { UnstartableError, type Runtime } from '../../src/compute/runtime.ts';
import { dockerSocketPath, FrameDemuxer } from '../../src/compute/runtimes/docker-api.ts';
import { START_ATTEMPTS } from '../../src/compute/supervisor.ts';
import { createDockerRuntime } from '../../src/compute/runtimes/docker.ts';
import { registryAuthHeader } from '../../src/compute/runtimes/docker-image.ts';
import { DockerEngineStandIn } from './fixtures/docker-engine.ts';
import { captureLog, eventually, freeUdpRange, instanceSpec, ReportLog, streamingSpec, tempDir } from './helpers.ts';

describe('docker runtime', () => {
  const { log } = captureLog();
  let state: Awaited<ReturnType<typeof tempDir>>;
  let engine: DockerEngineStandIn;
  let runtime: Runtime;
  let udpPool: [number, number];

  async function start(spec: InstanceSpec, on: Runtime = runtime) {
    const workDir = path.join(state.dir, 'instances', spec.instanceId);
    await mkdir(workDir, { recursive: true });
    const { env } = await prepareInstance(spec, workDir);
    return { instance: await on.start(spec, { workDir, env, log }), workDir };
  }

  before(async () => {
    state = await tempDir('docker');
    engine = new DockerEngineStandIn(path.join(state.dir, 'docker.sock'));
    await engine.listen();
    udpPool = await freeUdpRange(4);
    runtime = createDockerRuntime({ socketPath: engine.socketPath, agentName: 'agent-a', udpPortRange: udpPool, udpPortsPerInstance: 4, pull: 'always', network: 'engine', log });
  });

  after(async () => {
    await engine.close();
    await state.remove();
  });

  test('pulls with the registry credential, creates with env, ports, labels and mounts, reports published ports, follows logs, removes after the exit', async () => {
    const spec = instanceSpec('nvcr.io/org/app:1.2', {
      containerArgs: '--model "big one"',
      inferencePort: 8000,
      health: { protocol: 'HTTP', uri: '/health', port: 9000, timeout: 'PT2S', expectedStatusCode: 200 },
      containerEnvironment: [{ key: 'MODE', value: 'fast' }],
      secrets: [{ name: 'API_KEY', value: 'sk-123' }],
      registryAuth: { hostname: 'nvcr.io', secret: Buffer.from('$oauthtoken:nvapi-secret').toString('base64') },
    });
    const { instance, workDir } = await start(spec);

    const [pull] = engine.calls('POST', /^\/images\/create$/);
    assert.equal(pull.query.get('fromImage'), 'nvcr.io/org/app');
    assert.equal(pull.query.get('tag'), '1.2');
    assert.deepEqual(JSON.parse(Buffer.from(pull.headers['x-registry-auth'] as string, 'base64url').toString()),
      { username: '$oauthtoken', password: 'nvapi-secret', serveraddress: 'nvcr.io' });

    const [create] = engine.calls('POST', /^\/containers\/create$/);
    assert.equal(create.query.get('name'), `svc-i-${spec.instanceId}`);
    const body = create.body;
    assert.equal(body.Image, 'nvcr.io/org/app:1.2');
    assert.deepEqual(body.Cmd, ['--model', 'big one']);
    for (const entry of ['PORT=8000', 'INFERENCE_PORT=8000', 'HEALTH_PORT=9000', 'MODE=fast', 'API_KEY=sk-123',
      `SVC_INSTANCE_ID=${spec.instanceId}`, `SVC_SECRETS_FILE=${workDir}/secrets.json`]) {
      assert.ok(body.Env.includes(entry), `Env has ${entry}`);
    }
    assert.ok(!body.Env.some((entry: string) => entry.startsWith('STREAMING_')));
    assert.deepEqual(body.ExposedPorts, { '8000/tcp': {}, '9000/tcp': {} });
    assert.deepEqual(body.HostConfig.PortBindings, {
      '8000/tcp': [{ HostIp: '127.0.0.1', HostPort: '' }], '9000/tcp': [{ HostIp: '127.0.0.1', HostPort: '' }],
    });
    assert.deepEqual(body.HostConfig.Binds, [`${workDir}/secrets.json:${workDir}/secrets.json:ro`, `${workDir}/requests:${workDir}/requests:rw`],
      'the secrets file and the request directories, never the whole work dir');
    assert.equal(body.HostConfig.UsernsMode, 'auto:size=65536', 'a host uid range of its own');
    assert.deepEqual(body.HostConfig.CapDrop, ['ALL']);
    assert.deepEqual(body.HostConfig.SecurityOpt, ['no-new-privileges'], 'no seccomp=unconfined: the engine keeps its default profile');
    assert.equal(body.HostConfig.Privileged, undefined);
    assert.deepEqual([body.HostConfig.Memory, body.HostConfig.MemorySwap, body.HostConfig.NanoCpus, body.HostConfig.PidsLimit],
      [4 * 2 ** 30, 4 * 2 ** 30, 2e9, 1024], "the agent's defaults where the instance type grants nothing");
    assert.equal(body.HostConfig.ReadonlyRootfs, undefined, 'a read-only root is opt-in');
    assert.equal(body.HostConfig.Runtime, undefined, "the engine's own OCI runtime");
    assert.deepEqual(body.Labels, {
      'svc.agent': 'agent-a', 'svc.instance': spec.instanceId, 'svc.function': spec.functionId, 'svc.function-version': spec.functionVersionId,
    });
    assert.equal(body.HostConfig.DeviceRequests, undefined);

    const id = [...engine.containers.keys()][0];
    const published = engine.containers.get(id)!.hostPorts;
    assert.deepEqual(instance.endpoint, {
      host: '127.0.0.1',
      ports: { inference: Number(published['8000/tcp'][0].HostPort), health: Number(published['9000/tcp'][0].HostPort) },
      outputDir: path.join(workDir, 'requests'),
      // Published on the host's loopback: the platform's own loopback STUN/TURN is not this container's.
      ownLoopback: true,
    });
    assert.equal(engine.calls('POST', new RegExp(`^/containers/${id}/start$`)).length, 1);
    await eventually(() => (instance.logTail().length === 2 ? true : undefined), 'the demultiplexed log lines');
    assert.deepEqual(instance.logTail(), ['server starting', 'listening']);

    engine.exit(id, 3);
    assert.deepEqual(await instance.exited, { code: 3, signal: null });
    assert.equal(engine.calls('DELETE', new RegExp(`^/containers/${id}$`)).length, 1, 'removed once ended');
    assert.equal(engine.containers.size, 0);
  });

  test('STREAMING: control and streaming ports published, the UDP block 1:1; stop asks the engine with the grace in seconds', async () => {
    const { instance } = await start(streamingSpec('registry.local:5000/team/stream@sha256:abc'));
    const [, pull] = engine.calls('POST', /^\/images\/create$/);
    assert.equal(pull.query.get('fromImage'), 'registry.local:5000/team/stream');
    assert.equal(pull.query.get('tag'), 'sha256:abc');
    assert.equal(pull.headers['x-registry-auth'], undefined, 'no credential, no header');
    const body = engine.calls('POST', /^\/containers\/create$/).at(-1)!.body;
    const udp = Array.from({ length: 4 }, (_, i) => udpPool[0] + i);
    assert.deepEqual(Object.keys(body.ExposedPorts).sort(), ['49100/tcp', '8011/tcp', ...udp.map((p) => `${p}/udp`)].sort());
    for (const port of udp) assert.deepEqual(body.HostConfig.PortBindings[`${port}/udp`], [{ HostIp: '', HostPort: String(port) }]);
    for (const entry of ['STREAMING_SERVER_PORT=49100', 'CONTROL_SERVER_PORT=8011', 'HEALTH_PORT=8011', 'STREAMING_START_ENDPOINT=/sign_in',
      `STREAMING_PORT_BINDING_RANGE=${udpPool[0]}-${udpPool[1]}`]) {
      assert.ok(body.Env.includes(entry), `Env has ${entry}`);
    }
    const { ports } = instance.endpoint;
    assert.equal(ports.streaming, ports.inference);
    assert.equal(ports.health, ports.control);
    assert.notEqual(ports.control, 8011, 'host ports, not the container ports');
    assert.deepEqual(ports.udpRange, udpPool);

    await instance.stop(2500);
    const stopCall = engine.requests.findLast((r) => r.path.endsWith('/stop'))!;
    assert.equal(stopCall.query.get('t'), '3');
    assert.deepEqual(await instance.exited, { code: 143, signal: null });
    assert.equal(engine.containers.size, 0);
    // The block went back to the pool: the next streaming instance gets it.
    const again = await start(streamingSpec('registry.local:5000/team/stream:2'));
    assert.deepEqual(again.instance.endpoint.ports.udpRange, udpPool);
    await again.instance.stop(1000);
  });

  test('an image the registry does not have cannot start; other pull failures are retryable', async () => {
    await assert.rejects(start(instanceSpec('registry.example/missing:1')), (error: Error) =>
      error instanceof UnstartableError && /manifest unknown/.test(error.message));
    await assert.rejects(start(instanceSpec('registry.example/ratelimited:1')), (error: Error) =>
      !(error instanceof UnstartableError) && /toomanyrequests/.test(error.message));
    assert.equal(engine.calls('POST', /^\/containers\/create$/).filter((r) => /missing|ratelimited/.test(r.body.Image)).length, 0);
  });

  test("cleanup() removes this agent's leftover containers and no others", async () => {
    const mine = await start(instanceSpec('app:1'));
    const otherAgent = createDockerRuntime({ socketPath: engine.socketPath, agentName: 'agent-b', udpPortRange: udpPool, network: 'engine', log });
    const workDir = path.join(state.dir, 'instances', 'other');
    await mkdir(workDir, { recursive: true });
    const otherSpec = instanceSpec('app:1');
    const theirs = await otherAgent.start(otherSpec, { workDir, env: (await prepareInstance(otherSpec, workDir)).env, log });
    assert.equal(engine.containers.size, 2);

    await runtime.cleanup!();
    const filters = JSON.parse(engine.calls('GET', /^\/containers\/json$/).at(-1)!.query.get('filters')!);
    assert.deepEqual(filters, { label: ['svc.agent=agent-a'] });
    assert.deepEqual([...engine.containers.values()].map((c) => c.body.Labels['svc.agent']), ['agent-b']);
    await mine.instance.exited;
    await theirs.stop(1000);
  });

  test('a container that ends before its logs were read is removed only once they are', async () => {
    let release!: () => void;
    engine.logsHeld = new Promise((resolve) => (release = resolve));
    try {
      const { instance } = await start(instanceSpec('nvcr.io/org/app:1.2', { inferencePort: 8000 }));
      const id = [...engine.containers.keys()].at(-1)!;
      engine.exit(id, 3);
      setTimeout(release, 100);
      assert.deepEqual(await instance.exited, { code: 3, signal: null });
      assert.deepEqual(instance.logTail(), ['server starting', 'listening']);
      assert.equal(engine.containers.has(id), false, 'removed after');
    } finally {
      engine.logsHeld = undefined;
    }
  });

  test('an engine that has not stored the last lines when it reports the exit: its log is read again until they are there', async () => {
    // Neither the follow stream nor the first two reads after the exit find a line (podman at load 11, once).
    engine.unwrittenLogReads = 3;
    try {
      const { instance } = await start(instanceSpec('nvcr.io/org/app:1.2', { inferencePort: 8000 }));
      const id = [...engine.containers.keys()].at(-1)!;
      engine.exit(id, 3);
      assert.deepEqual(await instance.exited, { code: 3, signal: null });
      assert.deepEqual(instance.logTail(), ['server starting', 'listening']);
      assert.equal(engine.calls('GET', new RegExp(`^/containers/${id}/logs$`)).length, 4, 'the follow, then the stored log three times');
    } finally {
      engine.unwrittenLogReads = 0;
    }
  });

  test('a stored log that stays without the lines the follow stream caught: those lines are kept', async () => {
    const { instance } = await start(instanceSpec('nvcr.io/org/app:1.2', { inferencePort: 8000 }));
    const id = [...engine.containers.keys()].at(-1)!;
    await eventually(() => (instance.logTail().length === 2 ? true : undefined), 'the followed lines');
    engine.unwrittenLogReads = 100;
    try {
      engine.exit(id, 3);
      assert.deepEqual(await instance.exited, { code: 3, signal: null });
      assert.deepEqual(instance.logTail(), ['server starting', 'listening']);
      assert.ok(engine.calls('GET', new RegExp(`^/containers/${id}/logs$`)).length > 2, 'the stored log was asked for again');
      assert.equal(engine.containers.has(id), false, 'removed after');
    } finally {
      engine.unwrittenLogReads = 0;
    }
  });

  test('an engine that stops answering: an agent tries an instance START_ATTEMPTS times, then it is FAILED with the reason', async () => {
    const gone = new DockerEngineStandIn(path.join(state.dir, 'gone.sock'));
    await gone.listen();
    const agent = await startAgent({
      runtime: createDockerRuntime({ socketPath: gone.socketPath, agentName: 'agent-gone', network: 'engine', log }), stateDir: path.join(state.dir, 'gone-agent'), log,
      backoff: { initialMs: 10, maxMs: 20 },
    });
    await gone.close();
    const reports = new ReportLog(agent);
    const spec = instanceSpec('app:1');
    agent.applyDesired([spec]);
    const failed = await reports.waitForState(spec.instanceId, 'FAILED');
    assert.match(failed.message!, new RegExp(`^container engine at unix://${gone.socketPath} is not answering: \\w+ \\(${START_ATTEMPTS} starts in a row failed; not retried\\)$`));
    assert.equal(reports.states(spec.instanceId).filter((state) => state === 'RESTARTING').length, START_ATTEMPTS - 1);
    assert.match(reports.all.find((report) => report.state === 'RESTARTING')!.message!, /^start failed: container engine at/);
    await agent.stop();
  });

  test("an instance type's grant caps the container; read-only root and OCI runtime as set; a container killed for memory says so", async () => {
    const hardened = createDockerRuntime({
      socketPath: engine.socketPath, agentName: 'agent-a', network: 'engine', readOnlyRoot: true, ociRuntime: 'runsc',
      limits: { defaultMemory: 2 ** 30, defaultCpuCores: 1, pidsLimit: 64 }, log,
    });
    const agent = await startAgent({ runtime: hardened, stateDir: path.join(state.dir, 'oom-agent'), log, backoff: { initialMs: 10_000, maxMs: 10_000 } });
    const reports = new ReportLog(agent);
    const spec = instanceSpec('app:1', { resources: { memoryBytes: 512 * 2 ** 20, cpuCores: 0.5 } });
    agent.applyDesired([spec]);
    const container = await eventually(() => [...engine.containers.values()].find((c) => c.running && c.body.Labels['svc.instance'] === spec.instanceId), 'its container running');
    const { body } = container;
    assert.deepEqual([body.HostConfig.Memory, body.HostConfig.MemorySwap, body.HostConfig.NanoCpus, body.HostConfig.PidsLimit], [512 * 2 ** 20, 512 * 2 ** 20, 5e8, 64]);
    assert.equal(body.HostConfig.ReadonlyRootfs, true);
    assert.deepEqual(body.HostConfig.Tmpfs, { '/tmp': 'rw,nosuid,nodev,mode=1777' });
    assert.equal(body.HostConfig.Runtime, 'runsc');

    engine.exit(container.id, 137, true);
    const killed = await reports.waitFor((report) => report.instanceId === spec.instanceId && report.state === 'RESTARTING', 'the restart after the kill');
    assert.equal(killed.message, 'killed: out of memory (limit 512 MiB); last output: server starting | listening', 'the reason, then its last lines');
    assert.equal(killed.exitCode, 137);
    await agent.stop();
  });

  test('an engine that runs another OCI runtime than dockerRuntime (podman ignores HostConfig.Runtime) cannot start the instance', async () => {
    const podmanLike = new DockerEngineStandIn(path.join(state.dir, 'podman-like.sock'));
    podmanLike.honoursRuntime = false;
    await podmanLike.listen();
    try {
      const wanted = createDockerRuntime({ socketPath: podmanLike.socketPath, agentName: 'agent-a', network: 'engine', ociRuntime: 'runsc', log });
      await assert.rejects(start(instanceSpec('app:1'), wanted), (error: Error) =>
        error instanceof UnstartableError && /runs runc, not runsc \(dockerRuntime\)/.test(error.message));
      assert.equal(podmanLike.containers.size, 0, 'the created container is removed');
      assert.equal(podmanLike.calls('POST', /\/start$/).length, 0, 'never started');
      podmanLike.defaultRuntime = 'runsc'; // the engine's own default (containers.conf runtime = "runsc")
      const { instance } = await start(instanceSpec('app:1'), wanted);
      await instance.stop(1000);
    } finally {
      await podmanLike.close();
    }
  });

  test('frames of the multiplexed log stream survive any chunking', () => {
    const frames: [string, string][] = [];
    const demuxer = new FrameDemuxer((stream, payload) => frames.push([stream, payload.toString()]));
    const bytes = Buffer.concat([
      Buffer.from([1, 0, 0, 0, 0, 0, 0, 6]), Buffer.from('hello\n'),
      Buffer.from([2, 0, 0, 0, 0, 0, 0, 5]), Buffer.from('oops\n'),
      Buffer.from([1, 0, 0, 0, 0, 0, 0, 0]),
    ]);
    for (let i = 0; i < bytes.length; i += 3) demuxer.push(bytes.subarray(i, i + 3));
    assert.deepEqual(frames, [['stdout', 'hello\n'], ['stderr', 'oops\n'], ['stdout', '']]);
  });

  test('socket path and registry auth header', () => {
    assert.equal(dockerSocketPath({}), '/var/run/docker.sock');
    assert.equal(dockerSocketPath({ DOCKER_HOST: 'unix:///run/user/1000/docker.sock' }), '/run/user/1000/docker.sock');
    assert.throws(() => dockerSocketPath({ DOCKER_HOST: 'tcp://10.0.0.1:2375' }), /only unix/);
    const header = registryAuthHeader({ hostname: 'ghcr.io', secret: Buffer.from('me:pa:ss').toString('base64') });
    assert.match(header, /^[A-Za-z0-9_-]+=*$/, 'URL-safe base64');
    assert.equal(header.length % 4, 0, 'with its padding, as engines decode it');
    assert.deepEqual(JSON.parse(Buffer.from(header, 'base64url').toString()), { username: 'me', password: 'pa:ss', serveraddress: 'ghcr.io' });
  });
});
