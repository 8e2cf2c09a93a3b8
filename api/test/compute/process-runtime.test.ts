// The process runtime: real child processes on real ports. The samples answer per their contract, the
// port and environment contract holds (two instances side by side, STREAMING ports and UDP blocks), the
// streaming container runs and exits 0 after its session, stop ends the whole process group, and cleanup()
// ends what a killed agent left behind — and nothing else.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { WebSocket } from 'ws';
import { healthTarget, waitUntilHealthy, DEFAULT_PROBE_SETTINGS } from '../../src/compute/health.ts';
import { prepareInstance } from '../../src/compute/instance-env.ts';
import type { InstanceSpec } from '../../src/compute/protocol.ts';
import { UnstartableError, type Runtime, type RuntimeInstance } from '../../src/compute/runtime.ts';
import { lookUpImage } from '../../src/compute/runtimes/image-catalog.ts';
import { createProcessRuntime } from '../../src/compute/runtimes/process.ts';
import {
  captureLog, eventually, needsFfmpeg, FIXTURES_CATALOG, freeUdpRange, instanceSpec, isAlive, postJson, REPO_ROOT, SAMPLES_CATALOG,
  streamingSpec, tempDir,
} from './helpers.ts';

describe('process runtime', () => {
  const { log } = captureLog();
  let state: Awaited<ReturnType<typeof tempDir>>;
  let samples: Runtime;
  let fixtures: Runtime;
  let udpPool: [number, number];
  const running: RuntimeInstance[] = [];

  async function start(runtime: Runtime, spec: InstanceSpec, options: { healthy?: boolean } = {}) {
    const workDir = path.join(state.dir, 'instances', spec.instanceId);
    await mkdir(workDir, { recursive: true });
    const { env } = await prepareInstance(spec, workDir);
    const instance = await runtime.start(spec, { workDir, env, log });
    running.push(instance);
    if (options.healthy !== false) {
      const result = await waitUntilHealthy(healthTarget(spec.health, instance.endpoint), 20_000, DEFAULT_PROBE_SETTINGS, new AbortController().signal);
      assert.equal(result.outcome, 'healthy', `${spec.containerImage} became healthy`);
    }
    return { instance, workDir, url: `http://${instance.endpoint.host}:${instance.endpoint.ports.inference}` };
  }

  before(async () => {
    state = await tempDir('process-runtime');
    udpPool = await freeUdpRange(8);
    samples = createProcessRuntime({ catalogFile: SAMPLES_CATALOG, stateDir: state.dir, udpPortRange: udpPool, udpPortsPerInstance: 4, log });
    fixtures = createProcessRuntime({ catalogFile: FIXTURES_CATALOG, stateDir: state.dir, udpPortRange: udpPool, udpPortsPerInstance: 4, log });
  });

  after(async () => {
    await Promise.all(running.map((instance) => instance.stop(500)));
    await state.remove();
  });

  test('the samples answer per their contract (image looked up without its tag)', async () => {
    const [echo, bodyOnly, slow, sse, error] = await Promise.all([
      start(samples, instanceSpec('local/echo:1.0')),
      start(samples, instanceSpec('local/echo:1', { containerEnvironment: [{ key: 'ECHO_HEADERS', value: 'false' }] })),
      start(samples, instanceSpec('local/slow:latest')),
      start(samples, instanceSpec('local/sse')),
      start(samples, instanceSpec('local/error@sha256:0123')),
    ]);

    const echoed = await postJson(`${echo.url}/echo`, { hello: 'world' }, { 'svc-reqid': 'req-1', 'svc-function-id': 'fn-1', other: 'x' });
    assert.equal(echoed.status, 200);
    assert.match(echoed.headers.get('content-type') ?? '', /^application\/json/);
    assert.deepEqual(echoed.body, { echo: { hello: 'world' }, headers: { 'svc-reqid': 'req-1', 'svc-function-id': 'fn-1' } });
    const bare = await postJson(`${bodyOnly.url}/echo`, { hello: 'world' }, { 'svc-reqid': 'req-2' });
    assert.deepEqual(bare.body, { echo: { hello: 'world' } }, 'ECHO_HEADERS=false: the body alone');

    assert.deepEqual(await postJson(`${error.url}/error`, { status: 503, message: 'overloaded' }).then((r) => [r.status, r.body]), [503, { error: 'overloaded' }]);
    assert.deepEqual(await postJson(`${error.url}/error`, {}).then((r) => [r.status, r.body]), [500, { error: 'boom' }]);

    const requestDir = path.join(slow.instance.endpoint.outputDir!, 'req-slow');
    const done = await postJson(`${slow.url}/slow`, { seconds: 0.6 }, { 'svc-reqid': 'req-slow', 'svc-large-output-dir': requestDir });
    assert.deepEqual([done.status, done.body], [200, { done: true, seconds: 0.6 }]);
    assert.deepEqual(JSON.parse(await readFile(path.join(requestDir, 'progress'), 'utf8')), { id: 'req-slow', progress: 100, partialResponse: { step: 3 } });

    // Events are flushed one by one: the first read holds the first event only.
    const response = await fetch(`${sse.url}/stream`, { method: 'POST', body: JSON.stringify({ count: 3, intervalMs: 300 }) });
    assert.equal(response.headers.get('content-type'), 'text/event-stream');
    const reader = response.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    assert.equal(first, 'data: {"n":1}\n\n');
    let rest = '';
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) rest += new TextDecoder().decode(chunk.value);
    assert.equal(rest, 'data: {"n":2}\n\ndata: {"n":3}\n\n');
  });

  test('environment and ports: two instances of one function side by side, a separate health port', async () => {
    const base = instanceSpec('test/env', {
      inferencePort: 8000,
      health: { protocol: 'HTTP', uri: '/health', port: 9000, timeout: 'PT2S', expectedStatusCode: 200 },
      containerEnvironment: [{ key: 'GREETING', value: 'hi' }, { key: 'FROM_CATALOG', value: 'function wins' }],
      containerArgs: `--flag "two words" 'single quoted' plain\\ escaped`,
    });
    process.env.SVC_AGENT_ONLY_SETTING = 'must not leak';
    const one = await start(fixtures, base);
    const two = await start(fixtures, { ...base, instanceId: `${base.instanceId}-b` });
    delete process.env.SVC_AGENT_ONLY_SETTING;

    const [envOne, envTwo] = await Promise.all([one, two].map(async ({ url }) => (await (await fetch(`${url}/env`)).json()) as any));
    const ports = [one, two].flatMap(({ instance }) => [instance.endpoint.ports.inference, instance.endpoint.ports.health]);
    assert.equal(new Set(ports).size, 4, 'four distinct host ports');
    assert.equal(one.instance.endpoint.host, '127.0.0.1');
    assert.equal(envOne.env.PORT, String(one.instance.endpoint.ports.inference));
    assert.equal(envOne.env.INFERENCE_PORT, String(one.instance.endpoint.ports.inference));
    assert.equal(envOne.env.HEALTH_PORT, String(one.instance.endpoint.ports.health));
    assert.equal(envTwo.env.HEALTH_PORT, String(two.instance.endpoint.ports.health));
    assert.equal(envOne.env.GREETING, 'hi');
    assert.equal(envOne.env.FROM_CATALOG, 'function wins', "the function's environment wins over the catalog's");
    assert.equal(envOne.env.SVC_INSTANCE_ID, base.instanceId);
    assert.equal(envTwo.env.SVC_INSTANCE_ID, `${base.instanceId}-b`);
    assert.equal(envOne.env.SVC_FUNCTION_ID, base.functionId);
    assert.equal(envOne.env.SVC_FUNCTION_VERSION_ID, base.functionVersionId);
    assert.equal(envOne.env.SVC_NCA_ID, base.ncaId);
    assert.equal(envOne.env.PATH, process.env.PATH);
    assert.equal(envOne.env.SVC_AGENT_ONLY_SETTING, undefined, "the agent's own environment is not inherited");
    assert.equal(envOne.env.STREAMING_SERVER_PORT, undefined);
    assert.deepEqual(envOne.args, ['--flag', 'two words', 'single quoted', 'plain escaped']);
    assert.equal(one.instance.endpoint.outputDir, path.join(one.workDir, 'requests'));
  });

  test('STREAMING: control and streaming ports, start endpoint, separate blocks of the UDP pool; the streaming container runs and exits 0 after its session', { skip: needsFfmpeg() }, async () => {
    const app = await start(fixtures, streamingSpec('test/streaming-app', {
      containerEnvironment: [{ key: 'STREAMING_EXIT_DELAY_MS', value: '0' }, { key: 'STREAMING_BIND_ADDRESS', value: '127.0.0.1' }],
    }));
    const contract = await start(fixtures, streamingSpec('test/env'));
    const env = ((await (await fetch(`${contract.url}/env`)).json()) as any).env;
    const ports = contract.instance.endpoint.ports;
    assert.equal(env.STREAMING_SERVER_PORT, String(ports.inference));
    assert.equal(ports.streaming, ports.inference);
    assert.equal(env.CONTROL_SERVER_PORT, String(ports.control));
    assert.equal(ports.health, ports.control, 'the health check goes to the control server');
    assert.equal(env.STREAMING_START_ENDPOINT, '/sign_in');

    const blocks = [app.instance.endpoint.ports.udpRange!, ports.udpRange!];
    assert.equal(env.STREAMING_PORT_BINDING_RANGE, `${blocks[1][0]}-${blocks[1][1]}`);
    assert.deepEqual(blocks.map(([min]) => min).sort(), [udpPool[0], udpPool[0] + 4], 'one block of 4 each');
    for (const [min, max] of blocks) assert.equal(max - min + 1, 4);
    await assert.rejects(start(fixtures, streamingSpec('test/env'), { healthy: false }), (error: Error) =>
      !(error instanceof UnstartableError) && /exhausted/.test(error.message), 'a full pool is retryable, not a failure');

    // One session: hello, then bye; the container exits 0 and its UDP block returns to the pool.
    const ws = new WebSocket(`ws://127.0.0.1:${app.instance.endpoint.ports.streaming}/sign_in`);
    await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
    ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    await new Promise((resolve) => ws.once('message', resolve));
    ws.send(JSON.stringify({ type: 'bye', reason: 'test over' }));
    assert.deepEqual(await app.instance.exited, { code: 0, signal: null });
    ws.terminate();
    const again = await start(fixtures, streamingSpec('test/env'), { healthy: false });
    assert.deepEqual(again.instance.endpoint.ports.udpRange, app.instance.endpoint.ports.udpRange, 'the freed block is handed out again');
  });

  test('stop ends the whole process group, killing after the grace period; logTail keeps the last 50 lines', async () => {
    const { instance, url, workDir } = await start(fixtures, instanceSpec('test/family', {
      containerEnvironment: [{ key: 'IGNORE_SIGTERM', value: '1' }],
    }));
    const family = (await (await fetch(`${url}/family`)).json()) as { pid: number; child: number };
    assert.ok(isAlive(family.pid) && isAlive(family.child));
    const tail = await eventually(() => {
      const lines = instance.logTail();
      return lines.at(-1) === 'family line 80' ? lines : undefined;
    }, 'the last line in logTail');
    assert.equal(tail.length, 50);
    assert.equal(tail[0], 'family line 31');

    await instance.stop(300);
    const status = await instance.exited;
    assert.equal(status.signal, 'SIGKILL', 'SIGTERM was ignored, so the kill came');
    await eventually(() => (!isAlive(family.pid) && !isAlive(family.child)) || undefined, 'the group to end');
    assert.match(await readFile(path.join(workDir, 'output.log'), 'utf8'), /family line 1\n[^]*family line 80\n/);
  });

  test('an image missing from the catalog, or a command that does not exist, cannot start', async () => {
    await assert.rejects(start(samples, instanceSpec('local/nope:1'), { healthy: false }), (error: Error) =>
      error instanceof UnstartableError && error.message === `image local/nope:1 is not in the image catalog ${SAMPLES_CATALOG}`);
    await assert.rejects(start(fixtures, instanceSpec('test/no-such-command'), { healthy: false }), (error: Error) =>
      error instanceof UnstartableError && /cannot run \/nonexistent\/svc-test-binary .*ENOENT/.test(error.message));
    await assert.rejects(start(samples, instanceSpec(''), { healthy: false }), UnstartableError);
  });

  test('cleanup() ends the processes a killed agent left behind, and nothing else', async () => {
    const stateDir = path.join(state.dir, 'previous');
    const previous = spawn(process.execPath, [path.join(import.meta.dirname, 'fixtures/previous-agent.ts'), stateDir], { stdio: ['ignore', 'pipe', 'inherit'] });
    let output = '';
    previous.stdout.on('data', (chunk) => { output += chunk; });
    after(() => previous.kill('SIGKILL'));
    const left = await eventually(() => (output.includes('\n') ? JSON.parse(output) as { pid: number; child: number } : undefined), 'the previous agent to start its instance', 15_000);
    after(() => { try { process.kill(-left.pid, 'SIGKILL'); } catch { /* ended by cleanup, as it should */ } });
    previous.kill('SIGKILL');
    await new Promise((resolve) => previous.once('exit', resolve));
    assert.ok(isAlive(left.pid) && isAlive(left.child), 'its instance outlived it');

    // A stranger whose process group a forged pid file names, without our instance id in its environment.
    const stranger = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { detached: true, stdio: 'ignore' });
    after(() => stranger.kill('SIGKILL'));
    await writeFile(path.join(stateDir, 'pids', 'i-forged.json'), JSON.stringify({ pid: stranger.pid, instanceId: 'forged' }));

    await createProcessRuntime({ catalogFile: FIXTURES_CATALOG, stateDir, log }).cleanup!();
    assert.ok(!isAlive(left.pid) && !isAlive(left.child), 'the leftover instance and its child are gone');
    assert.ok(isAlive(stranger.pid!), 'a process that is not ours survives');
    await assert.rejects(readFile(path.join(stateDir, 'pids', 'i-forged.json')), 'pid files are removed');
  });

  test('the sample catalog runs the streaming container from the repository root', async () => {
    const entry = await lookUpImage(SAMPLES_CATALOG, 'local/streaming-app:2');
    assert.deepEqual(entry, { command: [process.execPath, 'streaming-app/src/main.ts'], cwd: REPO_ROOT.replace(/\/$/, ''), env: {} });
  });

  test('the echo with ECHO_DELAY_MS answers as the echo does; a delay that is no number stops it with one line', async () => {
    const delayed = await start(samples, instanceSpec('local/echo:1', { containerEnvironment: [{ key: 'ECHO_HEADERS', value: 'false' }, { key: 'ECHO_DELAY_MS', value: '5' }] }));
    assert.deepEqual((await postJson(`${delayed.url}/echo`, { late: true })).body, { echo: { late: true } });
    const wrong = await start(samples, instanceSpec('local/echo:1', { containerEnvironment: [{ key: 'ECHO_DELAY_MS', value: 'soon' }] }), { healthy: false });
    assert.deepEqual(await wrong.instance.exited, { code: 1, signal: null });
    await eventually(() => wrong.instance.logTail().find((line) => /ECHO_DELAY_MS must be a number of milliseconds, 0 or more \(got 'soon'\)/.test(line)), 'the line saying why');
  });

  test('the catalog resolves {node} to the running Node and paths against its directory', async () => {
    const catalog = path.join(state.dir, 'catalog.yaml');
    await writeFile(catalog, `images:\n  custom/echo:\n    command: [node, samples/echo.ts]\n    cwd: ${REPO_ROOT}\n`);
    const runtime = createProcessRuntime({ catalogFile: catalog, stateDir: state.dir, log });
    const { url } = await start(runtime, instanceSpec('custom/echo'));
    assert.equal((await postJson(`${url}/echo`, 1)).body.echo, 1);
    await writeFile(catalog, 'images: [not, a, mapping]\n');
    await assert.rejects(start(runtime, instanceSpec('custom/echo'), { healthy: false }), (error: Error) =>
      !(error instanceof UnstartableError) && /image catalog .*images/.test(error.message));
  });
});
