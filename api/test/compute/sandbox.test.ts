// The process runtime's sandbox, tried by a hostile tenant's function (fixtures/functions/probe.ts) on a
// real host: bubblewrap, a network namespace per instance, the platform's nftables table, cgroups. Two
// instances stand for two tenants; the test's own listeners stand for the host's services and the
// gateway's door. Needs root, bubblewrap, nftables, iproute2; outside CI their absence skips it.
import assert from 'node:assert/strict';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { healthTarget, waitUntilHealthy, DEFAULT_PROBE_SETTINGS } from '../../src/compute/health.ts';
import { prepareInstance } from '../../src/compute/instance-env.ts';
import type { InstanceSpec } from '../../src/compute/protocol.ts';
import type { Runtime, RuntimeInstance } from '../../src/compute/runtime.ts';
import { agentSettingsSchema } from '../../src/compute/settings.ts';
import { createRuntime } from '../../src/compute/worker.ts';
import { captureLog, FIXTURES_CATALOG, instanceSpec, postJson, tempDir } from './helpers.ts';
import { needsSandbox } from '../helpers/sandbox.ts';

const skip = needsSandbox('the process runtime sandbox');
const UID_BASE = 2_000_000_000;

describe('the process runtime sandbox against a hostile function', { skip }, () => {
  const { log } = captureLog();
  let state: Awaited<ReturnType<typeof tempDir>>;
  let runtime: Runtime;
  const listeners: net.Server[] = [];
  const ports = { loopback: 0, anyAddress: 0, door: 0 };
  let platformSecret: string;
  const running: RuntimeInstance[] = [];

  function listen(host: string): Promise<number> {
    // A probe that resets the connection must not crash the test process (an unhandled socket 'error').
    const server = net.createServer((socket) => socket.on('error', () => {}).end('host service\n'));
    listeners.push(server);
    return new Promise((resolve) => server.listen(0, host, () => resolve((server.address() as net.AddressInfo).port)));
  }

  async function start(spec: InstanceSpec) {
    const workDir = path.join(state.dir, 'agent', 'instances', spec.instanceId);
    const { env } = await prepareInstance(spec, workDir);
    const instance = await runtime.start(spec, { workDir, env, log });
    running.push(instance);
    const healthy = await waitUntilHealthy(healthTarget(spec.health, instance.endpoint), 20_000, DEFAULT_PROBE_SETTINGS, new AbortController().signal);
    assert.equal(healthy.outcome, 'healthy', JSON.stringify(instance.logTail()));
    const url = `http://${instance.endpoint.host}:${instance.endpoint.ports.inference}/probe`;
    return { instance, workDir, probe: (body: Record<string, unknown>) => postJson(url, body).then((answer) => answer.body as any) };
  }

  let a: Awaited<ReturnType<typeof start>>;
  let b: Awaited<ReturnType<typeof start>>;
  /** The host's side of a's network: where a would find the host's services. */
  let hostAddress: string;

  before(async () => {
    state = await tempDir('sandbox');
    // The platform's own secret, in the data dir the way the platform keeps it (0600 inside a 0700 dir).
    platformSecret = path.join(state.dir, 'secrets.key');
    await writeFile(platformSecret, 'the platform key', { mode: 0o600 });
    ports.loopback = await listen('127.0.0.1');
    ports.anyAddress = await listen('0.0.0.0');
    ports.door = await listen('0.0.0.0');
    const settings = agentSettingsSchema.parse({
      imageCatalog: FIXTURES_CATALOG, sandbox: 'on', defaultMemory: '256Mi', defaultCpuCores: 1, pidsLimit: 64,
    });
    ({ runtime } = await createRuntime({ settings, dataDir: state.dir, declaredGpus: [], log, sandbox: { doors: [ports.door], hidden: [] } },
      path.join(state.dir, 'agent'), log));
    [a, b] = await Promise.all([
      start(instanceSpec('test/probe', {
        ncaId: 'tenant-a', secrets: [{ name: 'A_SECRET', value: 'only for a' }],
        containerEnvironment: [{ key: 'NODE_OPTIONS', value: '--require=/tmp/evil.js' }, { key: 'MINE', value: 'a' }],
      })),
      start(instanceSpec('test/probe', { ncaId: 'tenant-b', secrets: [{ name: 'B_SECRET', value: 'only for b' }] })),
    ]);
    hostAddress = a.instance.endpoint.host.replace(/\.(\d+)$/, (_, last) => `.${Number(last) - 1}`);
  });

  after(async () => {
    await Promise.all(running.map((instance) => instance.stop(500)));
    await runtime?.close?.();
    for (const server of listeners) server.close();
    await state?.remove();
  });

  test('it runs as an unprivileged user of its own, with no capability and no way to gain one', async () => {
    const [ofA, ofB] = [await a.probe({ action: 'whoami' }), await b.probe({ action: 'whoami' })];
    for (const who of [ofA, ofB]) {
      assert.ok(who.uid >= UID_BASE, `uid ${who.uid}`);
      assert.equal(who.capEff, '0000000000000000');
      assert.equal(who.noNewPrivs, '1');
    }
    assert.notEqual(ofA.uid, ofB.uid, 'each instance is a user of its own');
  });

  test('it cannot read the platform\'s files, another instance\'s files or the host\'s secrets', async () => {
    assert.ok((await a.probe({ action: 'read', path: platformSecret })).error, 'the data dir is hidden');
    const listed = await a.probe({ action: 'list', path: state.dir });
    assert.ok(!listed.names?.includes('secrets.key'), `the data dir shows ${JSON.stringify(listed)}`);
    assert.ok((await a.probe({ action: 'read', path: path.join(b.workDir, 'secrets.json') })).error, "b's secrets");
    assert.ok((await a.probe({ action: 'read', path: '/etc/shadow' })).error, '/etc/shadow');
    assert.ok((await a.probe({ action: 'read', path: '/root/.bashrc' })).error, "root's home");
    const own = await a.probe({ action: 'read', path: path.join(a.workDir, 'secrets.json') });
    assert.deepEqual(JSON.parse(own.text), { A_SECRET: 'only for a' }, 'its own secrets file is readable');
  });

  test('it sees only its own processes and environment; a reserved name never reaches it', async () => {
    const { pids, cmdlines } = await a.probe({ action: 'procs' });
    assert.ok(pids.length <= 4, `processes seen: ${cmdlines.join(' | ')}`);
    assert.ok(!cmdlines.some((line: string) => line.includes('node --test') || line.includes('B_SECRET')));
    const { env } = await a.probe({ action: 'env' });
    assert.equal(env.MINE, 'a');
    assert.equal(env.A_SECRET, 'only for a');
    assert.equal(env.NODE_OPTIONS, undefined, 'NODE_OPTIONS is left out');
    assert.equal(env.B_SECRET, undefined);
  });

  test('it writes only its request directory and its own temporary space', async () => {
    assert.ok((await a.probe({ action: 'write', path: '/etc/svc-tenant' })).error, '/etc');
    assert.ok((await a.probe({ action: 'write', path: path.join(a.workDir, 'output.log') })).error, 'its work dir is read-only');
    assert.ok((await a.probe({ action: 'write', path: FIXTURES_CATALOG })).error, 'the catalog');
    // The data dir's path is an empty tmpfs of its own in there: what it writes there stays there.
    await a.probe({ action: 'write', path: path.join(state.dir, 'planted') });
    await assert.rejects(readFile(path.join(state.dir, 'planted')), { code: 'ENOENT' }, 'nothing reaches the data dir');
    assert.equal((await a.probe({ action: 'write', path: path.join(a.workDir, 'requests', 'r1') })).ok, true, 'its request directory');
    assert.equal((await a.probe({ action: 'write', path: '/tmp/mine' })).ok, true, 'its /tmp');
    assert.ok((await b.probe({ action: 'read', path: '/tmp/mine' })).error, "a's /tmp is a's alone");
    assert.equal(await readFile(path.join(a.workDir, 'requests', 'r1'), 'utf8'), 'written by a tenant');
  });

  test('it reaches neither the host\'s services nor another instance, only the gateway\'s door', async () => {
    assert.ok((await a.probe({ action: 'connect', host: '127.0.0.1', port: ports.loopback })).error, 'loopback is its own');
    assert.ok((await a.probe({ action: 'connect', host: hostAddress, port: ports.anyAddress })).error, 'a host service on every address');
    assert.ok((await a.probe({ action: 'connect', host: hostAddress, port: ports.loopback })).error, 'a loopback service through the host side');
    assert.deepEqual(await a.probe({ action: 'connect', host: hostAddress, port: ports.door }), { ok: true }, 'the door');
    const other = b.instance.endpoint;
    assert.ok((await a.probe({ action: 'connect', host: other.host, port: other.ports.inference })).error, "b's port");
    assert.deepEqual(await postJson(`http://${other.host}:${other.ports.inference}/probe`, { action: 'whoami' }).then((answer) => answer.status), 200,
      'while the host (the gateway) reaches b');
  });

  test('its processes are capped', async () => {
    const { started } = await a.probe({ action: 'spawn', count: 100 });
    await a.probe({ action: 'reap' });
    assert.ok(started < 64, `${started} of 100 children started under pids.max 64`);
  });

  test('an instance over its memory is killed, and its exit says why', async () => {
    const hungry = await start(instanceSpec('test/probe', { resources: { memoryBytes: 128 * 2 ** 20 } }));
    await hungry.probe({ action: 'alloc', mb: 512 }).catch(() => undefined);
    const status = await hungry.instance.exited;
    assert.equal(status.reason, 'killed: out of memory (limit 128 MiB)');
  });

  test('planted links and FIFOs in its request directory do not stall or mislead the agent', async () => {
    await mkdir(path.join(a.workDir, 'requests', 'r2'), { recursive: true });
    await chmod(path.join(a.workDir, 'requests', 'r2'), 0o777);
    const fifo = await a.probe({ action: 'fifo', path: path.join(a.workDir, 'requests', 'r2', 'progress') });
    assert.equal(fifo.ok, true, JSON.stringify(fifo));
    assert.equal((await a.probe({ action: 'symlink', target: '/', path: path.join(a.workDir, 'requests', 'r3') })).ok, true);
    const { readSmallFile } = await import('../../src/compute/safe-fs.ts');
    const outputDir = a.instance.endpoint.outputDir!;
    assert.equal(await readSmallFile(outputDir, ['r2', 'progress'], 1024), undefined, 'a FIFO is not read (and does not block)');
    assert.equal(await readSmallFile(outputDir, ['r3', 'etc', 'passwd'], 4096), undefined, 'a link is not followed');
  });
});

describe('the process runtime sandbox on an agent that advertises a host address', { skip }, () => {
  const { log } = captureLog();
  const hostAddress = Object.values(os.networkInterfaces()).flat().find((item) => item && !item.internal && item.family === 'IPv4')?.address;

  test('its instance is reached at the advertised address through the published port, and no more once it stopped', { skip: !hostAddress && 'no IPv4 address but loopback' }, async () => {
    const state = await tempDir('sandbox-published');
    const settings = agentSettingsSchema.parse({ imageCatalog: FIXTURES_CATALOG, sandbox: 'on', advertiseHost: hostAddress });
    const { runtime } = await createRuntime({ settings, dataDir: state.dir, declaredGpus: [], log }, path.join(state.dir, 'agent'), log);
    try {
      const spec = instanceSpec('test/probe');
      const workDir = path.join(state.dir, 'agent', 'instances', spec.instanceId);
      const { env } = await prepareInstance(spec, workDir);
      const instance = await runtime.start(spec, { workDir, env, log });
      assert.equal(instance.endpoint.host, hostAddress);
      const healthy = await waitUntilHealthy(healthTarget(spec.health, instance.endpoint), 20_000, DEFAULT_PROBE_SETTINGS, new AbortController().signal);
      assert.equal(healthy.outcome, 'healthy', JSON.stringify(instance.logTail()));
      const url = `http://${hostAddress}:${instance.endpoint.ports.inference}/probe`;
      const { addresses } = (await postJson(url, { action: 'whoami' })).body as { addresses: string[] };
      assert.notEqual(addresses[0], hostAddress, 'the instance itself is on its own network');
      await instance.stop(500);
      await assert.rejects(postJson(url, { action: 'whoami' }), 'the port is no longer published');
    } finally {
      await runtime.close?.();
      await state.remove();
    }
  });
});
