// The docker runtime against a real engine: podman's Docker-compatible API (helpers/podman.ts) running the
// project's images (npm run images). Containers are created, started, published, health-checked, invoked,
// stopped and removed for real; exit codes and logs come from real processes; pulls go through the engine
// to a registry (a stand-in: none is reachable here) that checks the credential the engine presents. The
// sandbox is probed from inside by a hostile tenant's script (fixtures/sandbox-probe.cjs): its user
// namespace, capabilities, files, limits and network, and gVisor's runsc as the engine's runtime.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import dgram from 'node:dgram';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { networkInterfaces } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DEFAULT_PROBE_SETTINGS, healthTarget, waitUntilHealthy } from '../../src/compute/health.ts';
import { outputDirOf, prepareInstance } from '../../src/compute/instance-env.ts';
import type { InstanceSpec } from '../../src/compute/protocol.ts';
import { UnstartableError, type RuntimeInstance } from '../../src/compute/runtime.ts';
import { createDockerRuntime, type DockerRuntimeOptions } from '../../src/compute/runtimes/docker.ts';
import { firewallTable } from '../../src/compute/runtimes/docker-firewall.ts';
import { agentTag } from '../../src/compute/runtimes/docker-network.ts';
import { containersLabelled, image, needsPodman, removeAgentLeftovers, startEngine, type Engine } from '../helpers/podman.ts';
import { RegistryStandIn } from './fixtures/registry.ts';
import { captureLog, eventually, freeUdpRange, instanceSpec, postJson, streamingSpec, tempDir } from './helpers.ts';

const skip = needsPodman([image('echo'), image('slow'), image('streaming-app')], 'the docker runtime against podman');
const AGENT = `podman-test-${process.pid}`;
const PROBE = new URL('./fixtures/sandbox-probe.cjs', import.meta.url);

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

  /** The probe as the instance's program (copied where the container can read it), started and healthy. */
  async function startProbe(overrides: Partial<InstanceSpec> = {}, options: Partial<DockerRuntimeOptions> = {}) {
    const spec = instanceSpec(image('echo'), overrides);
    const outputDir = outputDirOf(path.join(state.dir, 'instances', spec.instanceId));
    await mkdir(outputDir, { recursive: true });
    await copyFile(PROBE, path.join(outputDir, 'probe.cjs'));
    spec.containerArgs = `node ${path.join(outputDir, 'probe.cjs')}`;
    const started = await start(spec, options);
    await healthy(spec, started.instance);
    const ask = async (query: string): Promise<any> => (await fetch(`${started.url}${query}`)).json();
    return { ...started, spec, ask };
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
    if (engine) for (const name of [AGENT, `${AGENT}-other`]) await removeAgentLeftovers(engine, name);
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
    const mounts = inspect.Mounts.map((mount: any) => [mount.Source, mount.Destination, mount.RW]).sort();
    assert.deepEqual(mounts, [[`${workDir}/requests`, `${workDir}/requests`, true], [`${workDir}/secrets.json`, `${workDir}/secrets.json`, false]],
      'the request directories and the secrets file (read-only) at their host paths, never the whole work dir');

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
  test("a container's root is not the host's: a uid range of its own; it reads its secrets, writes its request directory, and sees nothing else of the work dir", async () => {
    const { ask, workDir } = await startProbe({ secrets: [{ name: 'API_KEY', value: 'sk-1' }] });
    await writeFile(path.join(workDir, 'output.log'), 'the agent keeps this');
    const facts = await ask('/facts');
    assert.equal(facts.uid, 1000, "the image's user");
    assert.equal(facts.uidMap[0], 0);
    assert.ok(facts.uidMap[1] >= 65536, `container uid 0 must be a host uid beyond the host's own users, not ${facts.uidMap[1]}`);
    assert.deepEqual(facts.secrets, { API_KEY: 'sk-1' }, 'the secrets file is readable');
    assert.equal(facts.secretsWrite, 'EROFS', 'and read-only');
    assert.deepEqual(facts.workDir, ['requests', 'secrets.json'], 'nothing else of the work dir');
    assert.equal(facts.requestWrite, 'ok');
    const owner = (await stat(path.join(workDir, 'requests', 'probe-owner'))).uid;
    assert.equal(owner, facts.uidMap[1] + 1000, 'what it writes belongs to its mapped uid on the host');
  });

  test("no capabilities, no privilege escalation, the engine's seccomp filter; memory and pids capped from the instance type and the agent's defaults", async () => {
    const { ask, instance, spec } = await startProbe({ resources: { memoryBytes: 96 * 2 ** 20, cpuCores: 0.5 } }, {
      limits: { defaultMemory: 2 ** 30, defaultCpuCores: 1, pidsLimit: 32 },
    });
    const facts = await ask('/facts');
    assert.deepEqual([facts.capEff, facts.noNewPrivs, facts.seccomp], ['0000000000000000', '1', '2']);
    const host = (await engine.call('GET', `/containers/${(await containerOf(spec))!.Id}/json`)).body.HostConfig;
    assert.deepEqual([host.Memory, host.PidsLimit, host.NanoCpus || host.CpuQuota * 1e4], [96 * 2 ** 20, 32, 5e8]);
    const spawned = await ask('/spawn?count=64');
    assert.ok(spawned < 32, `at most 32 processes at once (started ${spawned} more)`);
    await fetch(`http://${instance.endpoint.host}:${instance.endpoint.ports.inference}/allocate?mb=512`).catch(() => undefined);
    // podman on cgroup v1 does not say OOMKilled (docs/containers.md), so the report says "exited with code 137" here.
    assert.equal((await instance.exited).code, 137, 'killed by the kernel at its memory cap');
  });

  test('a read-only root when asked (dockerReadOnlyRoot): /tmp is a tmpfs, the mounts still work', async () => {
    const { ask } = await startProbe({}, { readOnlyRoot: true });
    const facts = await ask('/facts');
    assert.deepEqual([facts.homeWrite, facts.tmpWrite, facts.requestWrite], ['EROFS', 'ok', 'ok']);
    const writable = await startProbe();
    assert.equal((await writable.ask('/facts')).homeWrite, 'ok', 'writable by default');
  });

  test("accounts' networks: one account's container reaches neither another's nor the host's listeners, only the allowed door; the platform reaches both", async () => {
    const door = await listener();
    const other = await listener();
    const options = { hostPorts: [door.port] };
    const a = await startProbe({ ncaId: `acct-a-${process.pid}` }, options);
    const b = await startProbe({ ncaId: `acct-b-${process.pid}` }, options);
    const networkOf = async (spec: InstanceSpec) => {
      const settings = (await engine.call('GET', `/containers/${(await containerOf(spec))!.Id}/json`)).body.NetworkSettings.Networks;
      const [name, network] = Object.entries(settings)[0] as [string, { IPAddress: string; Gateway: string }];
      return { name, ...network };
    };
    const [netA, netB] = [await networkOf(a.spec), await networkOf(b.spec)];
    assert.notEqual(netA.name, netB.name, 'a network per account');
    const labels = (await engine.call('GET', `/networks/${netA.name}`)).body.Labels;
    assert.deepEqual([labels['svc.agent'], labels['svc.account']], [AGENT, a.spec.ncaId]);

    const hostAddress = Object.entries(networkInterfaces())
      .filter(([name]) => !/^(lo|svc|podman|veth|cni|docker|br-)/.test(name))
      .flatMap(([, addresses]) => addresses ?? []).find((address) => address.family === 'IPv4' && !address.internal)?.address;
    const targets = [[netB.IPAddress, 8000, "B's container"], [netA.Gateway, other.port, 'a host listener on the bridge'],
      ...(hostAddress ? [[hostAddress, other.port, `a host listener on ${hostAddress}`]] : [])] as const;
    for (const [host, port, what] of targets) {
      assert.notEqual(await a.ask(`/connect?host=${host}&port=${port}`), 'connected', `A cannot reach ${what}`);
    }
    assert.equal(await a.ask(`/connect?host=${netA.Gateway}&port=${door.port}`), 'connected', 'the door stays open');
    assert.equal(await b.ask(`/connect?host=${netA.IPAddress}&port=8000`), 'ECONNREFUSED', "nor B A's");
    for (const probe of [a, b]) assert.equal((await fetch(`${probe.url}/health`)).status, 200, 'published ports still serve the platform');

    door.server.close();
    other.server.close();
    await Promise.all(started.splice(0).map((instance) => instance.stop(1000)));
    await runtime().close!();
    const filters = encodeURIComponent(JSON.stringify({ label: [`svc.agent=${AGENT}`] }));
    assert.deepEqual((await engine.call('GET', `/networks?filters=${filters}`)).body, [], "close() removes the agent's networks");
    assert.throws(() => execFileSync('nft', ['list', 'table', 'inet', firewallTable(agentTag(AGENT))], { stdio: 'ignore' }), 'and its firewall table');
  });
});

const runscSkip = skip || (!process.env.CI && !existsSync('/usr/bin/runsc') && (console.log('# skipping gVisor: needs runsc (Debian package runsc)'), true));

describe('docker runtime on podman with gVisor (runsc)', { skip: runscSkip }, () => {
  const { log } = captureLog();
  let gvisor: Engine;
  let runcEngine: Engine;
  let state: Awaited<ReturnType<typeof tempDir>>;
  const agentName = `${AGENT}-gvisor`;

  before(async () => {
    // This runsc (2022) takes every network namespace for the host's on kernels where net.core.rmem_default
    // is per namespace and refuses it; --network=host makes it use the container's own namespace as is.
    gvisor = await startEngine({ runtime: { name: 'runsc', command: ['/usr/bin/runsc', '--network=host'] } });
    runcEngine = await startEngine();
    state = await tempDir('gvisor');
  });

  after(async () => {
    if (gvisor) await removeAgentLeftovers(gvisor, agentName);
    await gvisor?.close();
    await runcEngine?.close();
    await state?.remove();
  });

  async function start(engine: Engine) {
    const spec = instanceSpec(image('echo'), { ncaId: `acct-g-${process.pid}` });
    const outputDir = outputDirOf(path.join(state.dir, 'instances', spec.instanceId));
    await mkdir(outputDir, { recursive: true });
    await copyFile(PROBE, path.join(outputDir, 'probe.cjs'));
    spec.containerArgs = `node ${path.join(outputDir, 'probe.cjs')}`;
    const workDir = path.dirname(outputDir);
    const { env } = await prepareInstance(spec, workDir);
    // runsc refuses a user namespace of podman's (its sandbox: "error converting mounts"): gVisor's own kernel is the boundary.
    const runtime = createDockerRuntime({ socketPath: engine.socketPath, agentName, ociRuntime: 'runsc', userns: 'engine', log });
    return { spec, instance: await runtime.start(spec, { workDir, env, log }) };
  }

  test("an instance under runsc: its port published, served through it, gVisor's kernel inside; an engine on another runtime refuses it", async () => {
    const { spec, instance } = await start(gvisor);
    const result = await waitUntilHealthy(healthTarget(spec.health, instance.endpoint), 60_000, DEFAULT_PROBE_SETTINGS, new AbortController().signal);
    assert.equal(result.outcome, 'healthy');
    const facts: any = await (await fetch(`http://${instance.endpoint.host}:${instance.endpoint.ports.inference}/facts`)).json();
    assert.equal(facts.kernel, '4.4.0', "gVisor's kernel, not the host's");
    assert.deepEqual([facts.capEff, facts.requestWrite, facts.secrets], ['0000000000000000', 'ok', {}]);
    await instance.stop(2000);

    await assert.rejects(start(runcEngine), (error: Error) => error instanceof UnstartableError && /runs runc, not runsc/.test(error.message));
  });
});

/** A TCP listener on all of the host's addresses. */
async function listener(): Promise<{ server: net.Server; port: number }> {
  const server = net.createServer((socket) => socket.end());
  await new Promise<void>((resolve) => server.listen(0, '0.0.0.0', resolve));
  return { server, port: (server.address() as net.AddressInfo).port };
}
