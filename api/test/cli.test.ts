// The `svc` command as a user runs it: a real `svc serve` process, then init, api-key generate, and a
// request with the key; plus the one-line failures (old Node, bad configuration, bad flags).
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import dgram from 'node:dgram';
import { once } from 'node:events';
import { existsSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { tempDir } from './helpers/databases.ts';
import { request } from './helpers/http.ts';
import { freePort } from './helpers/wait.ts';

const run = promisify(execFile);

function olderNode(): boolean {
  if (!existsSync('/usr/bin/node')) return false;
  return Number(execFileSync('/usr/bin/node', ['--version']).toString().slice(1).split('.')[0]) < 24;
}
const svcBin = path.resolve(import.meta.dirname, '../bin/svc.js');

async function svc(args: string[], env: NodeJS.ProcessEnv) {
  try {
    // No TURN server unless a test asks for one: the default port (3478) may be another process's.
    const { stdout, stderr } = await run(process.execPath, [svcBin, ...args], { env: { ...process.env, SVC_TURN_SERVER: 'none', ...env } });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe('svc CLI against a running `svc serve`', () => {
  let server: ChildProcess;
  let url = '';
  let secret = '';
  const dataDir = tempDir();
  const env = { SVC_STATE_FILE: path.join(dataDir, 'cli', 'state.json'), SVC_DATA_DIR: dataDir } as NodeJS.ProcessEnv;

  before(async () => {
    server = spawn(process.execPath, [svcBin, 'serve'], {
      env: { ...process.env, SVC_PORT: '0', SVC_HOST: '127.0.0.1', SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: 'warn', SVC_TURN_SERVER: 'none' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    await new Promise<void>((resolve, reject) => {
      server.stdout!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        const found = /API\s+(http:\/\/localhost:\d+)/.exec(output);
        const bootstrap = /Bootstrap secret[^:]*: (svcboot-\S+)/.exec(output);
        if (found && bootstrap) {
          url = found[1];
          secret = bootstrap[1];
          resolve();
        }
      });
      server.once('exit', (code) => reject(new Error(`svc serve exited ${code}: ${output}`)));
    });
    env.SVC_SERVER = url;
  });
  after(() => {
    server.kill('SIGTERM');
  });

  test('init → api-key generate → a request with that key answers 200', async () => {
    const init = await svc(['init', '--secret', secret], env);
    assert.equal(init.code, 0, init.stderr);
    assert.match(init.stdout, /Management token saved for account svc-default/);
    assert.equal(statSync(env.SVC_STATE_FILE!).mode & 0o777, 0o600);

    const generated = await svc(['api-key', 'generate', '--json'], env);
    assert.equal(generated.code, 0, generated.stderr);
    const key = JSON.parse(generated.stdout);
    assert.equal(key.type, 'SVC_API_KEY');
    assert.deepEqual(key.authorizations.policies[0].scopes, ['invoke_function', 'list_functions', 'queue_details', 'list_functions_details']);

    const response = await request(url, 'GET', '/v2/svc/functions', { bearer: key.value });
    assert.equal(response.status, 200);
    assert.deepEqual(response.body, { functions: [] });
  });

  test('function, deployment, cluster and registry commands', async () => {
    const file = path.join(dataDir, 'echo.json');
    writeFileSync(file, JSON.stringify({
      name: 'cli-echo', inferenceUrl: '/echo', inferencePort: 8000, containerImage: 'local/echo:1',
      health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 },
    }));
    const created = await svc(['function', 'create', '--file', file, '--json'], env);
    assert.equal(created.code, 0, created.stderr);
    const fn = JSON.parse(created.stdout).function;
    assert.equal(fn.health.uri, '/health');
    const listed = await svc(['function', 'list'], env);
    assert.match(listed.stdout, /^ID\s+VERSIONID\s+NAME\s+STATUS/m);
    assert.match(listed.stdout, new RegExp(`${fn.versionId}\\s+cli-echo\\s+INACTIVE`));
    const groups = await svc(['cluster', 'groups'], env);
    assert.match(groups.stdout, /svc-local\s+LOCAL\s+LOCAL\.CPU_1x\s+local/);
    const deployed = await svc(['deployment', 'create', fn.id, fn.versionId, '--gpu', 'LOCAL', '--instance-type', 'LOCAL.CPU_1x', '--json'], env);
    assert.equal(deployed.code, 0, deployed.stderr);
    assert.equal(JSON.parse(deployed.stdout).deployment.functionStatus, 'DEPLOYING');
    const updated = await svc(['deployment', 'update', fn.id, fn.versionId, '--max', '3', '--json'], env);
    assert.equal(JSON.parse(updated.stdout).deployment.deploymentSpecifications[0].maxInstances, 3);
    const removed = await svc(['deployment', 'delete', fn.id, fn.versionId], env);
    assert.match(removed.stdout, /version is INACTIVE/);
    const registry = await svc(['registry', 'create', '--hostname', 'nvcr.io', '--name', 'ngc', '--secret', 'dXNlcjpwYXNz', '--json'], env);
    assert.equal(JSON.parse(registry.stdout).registryCredential.registryName, 'NGC');
    assert.ok(!(await svc(['registry', 'list'], env)).stdout.includes('dXNlcjpwYXNz'));
    const cluster = await svc(['cluster', 'register', 'rack-1', '--group', 'dc', '--gpu', 'L40S:L40S_1x', '--json'], env);
    assert.match(JSON.parse(cluster.stdout).agentCredential, /^svcagent-/);
    assert.match((await svc(['cluster', 'list'], env)).stdout, /rack-1\s+dc\s+REGISTERED\s+L40S/);
    const deleted = await svc(['function', 'delete', fn.id, fn.versionId], env);
    assert.equal(deleted.code, 0, deleted.stderr);
    const missing = await svc(['function', 'get', fn.id, fn.versionId], env);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /\(404\)/);
  });

  test('function secrets: set from the environment or a file, listed by name, values never printed', async () => {
    const file = path.join(dataDir, 'secret-fn.json');
    writeFileSync(file, JSON.stringify({
      name: 'cli-secrets', inferenceUrl: '/echo', containerImage: 'local/echo:1', secrets: [{ name: 'FIRST', value: 'first-value' }],
    }));
    const fn = JSON.parse((await svc(['function', 'create', '--file', file, '--json'], env)).stdout).function;
    const tokenFile = path.join(dataDir, 'token.txt');
    writeFileSync(tokenFile, 'file-value\n');
    const set = await svc(['function', 'secrets', 'set', fn.id, fn.versionId, 'FROM_ENV', `FROM_FILE=@${tokenFile}`], { ...env, FROM_ENV: 'env-value' });
    assert.equal(set.code, 0, set.stderr);
    assert.equal(set.stdout.trim(), 'Set FROM_ENV, FROM_FILE');
    const listed = await svc(['function', 'secrets', 'list', fn.id, fn.versionId, '--json'], env);
    assert.deepEqual(JSON.parse(listed.stdout).secrets.sort(), ['FIRST', 'FROM_ENV', 'FROM_FILE']);
    const shown = await svc(['function', 'get', fn.id, fn.versionId], env);
    for (const value of ['first-value', 'env-value', 'file-value']) assert.ok(!`${set.stdout}${listed.stdout}${shown.stdout}`.includes(value), value);
    const unset = await svc(['function', 'secrets', 'set', fn.id, fn.versionId, 'NOT_IN_ENV'], env);
    assert.equal(unset.code, 1);
    assert.match(unset.stderr, /^svc function secrets set: NOT_IN_ENV: no environment variable NOT_IN_ENV holds its value/);
  });

  test('a task key gets the task scopes by default', async () => {
    const generated = await svc(['api-key', 'generate', '--task', '--json'], env);
    const key = JSON.parse(generated.stdout);
    assert.equal(key.type, 'SVC_TASK_API_KEY');
    assert.ok(key.authorizations.policies[0].scopes.includes('launch_task'));
  });

  test('admin token and account commands, human and --json', async () => {
    const token = await svc(['admin', 'token'], env);
    assert.equal(token.code, 0, token.stderr);
    assert.equal(token.stdout.trim().split('.').length, 3);
    const set = await svc(['account', 'set-limits', '--max-functions', '42'], env);
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.stdout, /maxFunctionsAllowed\s+42/);
    const get = await svc(['account', 'get', 'svc-default', '--json'], env);
    assert.equal(JSON.parse(get.stdout).account.maxFunctionsAllowed, 42);
    const list = await svc(['account', 'list'], env);
    assert.match(list.stdout, /^NCAID\s+NAME/m);
  });

  test('failures are one line and a non-zero exit', async () => {
    const badSecret = await svc(['init', '--secret', 'svcboot-wrong'], env);
    assert.equal(badSecret.code, 1);
    assert.equal(badSecret.stderr.trim(), 'svc init: POST /v1/admin/keys failed (401): Invalid bootstrap secret, or one already used or expired (docs/security.md)');
    const badLimit = await svc(['account', 'set-limits', '--max-telemetries', '51'], env);
    assert.equal(badLimit.code, 1);
    assert.match(badLimit.stderr.trim(), /^svc account set-limits: .*maxTelemetriesAllowed.*$/);
    const badFlag = await svc(['api-key', 'generate', '--nope'], env);
    assert.equal(badFlag.code, 1);
    assert.equal(badFlag.stderr.trim().split('\n').length, 1);
    const unknown = await svc(['frobnicate'], env);
    assert.equal(unknown.code, 2);
  });
});

describe('svc CLI against a server that is not svc', () => {
  /** A web server that answers every request 200 with `body`: what --server reaches when it names the wrong port. */
  async function answering(body: string, type: string): Promise<{ url: string; close(): void }> {
    const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': type }).end(body));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, close: () => server.close() };
  }

  test('an answer svc does not send ends the command with one line and exit code 1', async () => {
    const json = await answering('{"message":"hello"}', 'application/json');
    const html = await answering('<!doctype html><title>Welcome</title>', 'text/html');
    try {
      const env = { SVC_STATE_FILE: path.join(tempDir(), 'state.json'), SVC_ADMIN_TOKEN: 'not-checked', SVC_API_KEY: 'not-checked' };
      const accounts = await svc(['account', 'list'], { ...env, SVC_SERVER: json.url });
      assert.equal(accounts.code, 1);
      assert.equal(accounts.stderr.trim().split('\n').length, 1, accounts.stderr);
      assert.match(accounts.stderr, /^svc account list: GET \/v2\/svc\/accounts answered what svc does not \(accounts: is required\); is http:\/\/127\.0\.0\.1:\d+ an svc gateway/);
      const functions = await svc(['function', 'list'], { ...env, SVC_SERVER: html.url });
      assert.equal(functions.code, 1);
      assert.equal(functions.stderr.trim().split('\n').length, 1, functions.stderr);
      assert.match(functions.stderr, /^svc function list: GET \/v2\/svc\/functions\?limit=1000 answered something that is not JSON \("<!doctype html>/);
    } finally {
      json.close();
      html.close();
    }
  });
});

describe('svc start-up checks', () => {
  test('bad configuration stops `svc serve` with one line naming the setting', async () => {
    const result = await svc(['serve'], { SVC_PORT: 'eighty', SVC_DATA_DIR: tempDir() });
    assert.equal(result.code, 1);
    assert.equal(result.stderr.trim().split('\n').length, 1);
    assert.match(result.stderr, /^svc serve: invalid setting gateway\.port \(SVC_PORT\)/);
  });

  test('a NATS URL that is malformed or unreachable stops `svc serve` with one line', async () => {
    const malformed = await svc(['serve'], { SVC_PORT: '0', SVC_DATA_DIR: tempDir(), SVC_NATS_URL: 'http://127.0.0.1:4222' });
    assert.equal(malformed.code, 1);
    assert.match(malformed.stderr.trim(), /^svc serve: invalid setting invocation\.natsUrl \(SVC_NATS_URL\): must be nats:\/\/host\[:port\] or tls:\/\/host\[:port\]$/);
    const unreachable = await svc(['serve'], { SVC_PORT: '0', SVC_DATA_DIR: tempDir(), SVC_NATS_URL: 'nats://127.0.0.1:1' });
    assert.equal(unreachable.code, 1);
    assert.equal(unreachable.stderr.trim().split('\n').length, 1, unreachable.stderr);
    assert.match(unreachable.stderr, /cannot reach NATS at nats:\/\/127\.0\.0\.1:1/);
  });

  test('an unreachable PostgreSQL stops `svc serve` with one line', async () => {
    const result = await svc(['serve'], { SVC_PORT: '0', SVC_DATA_DIR: tempDir(), SVC_DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none' });
    assert.equal(result.code, 1);
    assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr);
    assert.doesNotMatch(result.stderr, /\n\s+at /);
  });

  test('a gateway port already taken stops `svc serve` with one line, and nothing it started keeps running', async () => {
    const taken = net.createServer().listen(0, '127.0.0.1');
    await once(taken, 'listening');
    try {
      const port = (taken.address() as net.AddressInfo).port;
      // Returns only once the process has exited: loops or a TURN server left running would hang it.
      const result = await svc(['serve'], { SVC_PORT: String(port), SVC_HOST: '127.0.0.1', SVC_DATA_DIR: tempDir(), SVC_TURN_SERVER: 'node-turn', SVC_TURN_PORT: String(await freePort()) });
      assert.equal(result.code, 1);
      assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr);
      assert.match(result.stderr, /^svc serve: the gateway cannot listen on 127\.0\.0\.1:\d+ \(gateway\.host, gateway\.port: SVC_HOST, SVC_PORT\): the port is in use$/m);
      assert.doesNotMatch(result.stdout, /"level":50/, 'no errors from loops running on after start-up failed');
    } finally {
      taken.close();
    }
  });

  test('a TURN port already taken (UDP) stops `svc serve` with one line naming SVC_TURN_PORT', async () => {
    const taken = dgram.createSocket('udp4').bind(0, '127.0.0.1');
    await once(taken, 'listening');
    try {
      const result = await svc(['serve'], {
        SVC_PORT: String(await freePort()), SVC_HOST: '127.0.0.1', SVC_DATA_DIR: tempDir(), SVC_TURN_SERVER: 'node-turn',
        SVC_TURN_LISTEN_IP: '127.0.0.1', SVC_TURN_PORT: String(taken.address().port),
      });
      assert.equal(result.code, 1);
      assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr);
      assert.match(result.stderr, /^svc serve: the TURN server \(UDP\) cannot listen on 127\.0\.0\.1:\d+ \(.*SVC_TURN_PORT\): the port is in use$/m);
    } finally {
      taken.close();
    }
  });

  test('an older Node gets a clear message, not a stack trace', { skip: olderNode() ? false : 'no Node older than 24 at /usr/bin/node' }, async () => {
    const result = await run('/usr/bin/node', [svcBin, 'serve']).catch((error) => error as { code: number; stderr: string });
    assert.equal((result as { code: number }).code, 1);
    assert.match((result as { stderr: string }).stderr, /^svc needs Node\.js 24 or newer; this is v\d+/);
  });
});
