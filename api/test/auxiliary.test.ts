// The platform's auxiliary processes on a real `svc serve --samples`: coturn and the demo proxy end with
// the platform even on kill -9, are ended at the next start when their watchdogs were killed too, keep the
// TURN secret off command lines, and the demo proxy listens on loopback and fails fast on a taken port.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import dgram from 'node:dgram';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';
import { describe, test } from 'node:test';
import { stunAnswers } from '../src/turn/server.ts';
import { tempDir } from './helpers/databases.ts';
import { descendantsOf, isAlive, type Proc } from './helpers/processes.ts';
import { servePlatform } from './helpers/served.ts';
import { freePort, until } from './helpers/wait.ts';

const COTURN = '/usr/bin/turnserver';
const skip = !existsSync(COTURN) && !process.env.CI ? 'needs coturn (Debian package coturn)' : false;
if (skip) console.log(`# skipping auxiliary process tests: ${skip}`);
const SECRET = 'turn-secret-that-must-stay-off-command-lines';
const svcBin = path.resolve(import.meta.dirname, '../bin/svc.js');

async function auxiliaryEnv(): Promise<NodeJS.ProcessEnv> {
  const relay = await freePort();
  return {
    SVC_TURN_SERVER: 'coturn', SVC_TURN_PORT: String(await freePort()), SVC_TURN_RELAY_PORT_RANGE: `${relay}-${relay + 10}`,
    SVC_TURN_SECRET: SECRET, SVC_DEMO_PROXY_PORT: String(await freePort()),
    // Samples are deployed (so the demo proxy runs) but no instance is started.
    SVC_IN_PROCESS_AGENT: 'false',
  };
}

/** Local addresses listening on a TCP port (/proc/net/tcp and tcp6: hex address:port, state 0A = LISTEN). */
function listeningAddresses(port: number): string[] {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  return ['/proc/net/tcp', '/proc/net/tcp6'].flatMap((file) => readFileSync(file, 'utf8').split('\n').slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((fields) => fields[3] === '0A' && fields[1]?.endsWith(`:${hexPort}`))
    .map((fields) => fields[1].split(':')[0]));
}

const isCoturn = (proc: Proc) => proc.args[0] === COTURN;
const isDemoProxy = (proc: Proc) => proc.args[0] === process.execPath && proc.args[1]?.endsWith('proxy/src/main.ts');

describe('auxiliary processes of svc serve --samples', { skip }, () => {
  test('coturn and the demo proxy: secret in a 0600 file, proxy on loopback, both gone after kill -9, both back after a restart', async (t) => {
    const env = await auxiliaryEnv();
    const served = await servePlatform(env, { args: ['--samples'] });
    t.after(() => served.stop());
    const helpers = descendantsOf(served.process.pid!);
    const coturn = helpers.find(isCoturn);
    const proxy = helpers.find(isDemoProxy);
    assert.ok(coturn && proxy, JSON.stringify(helpers));

    for (const proc of helpers) assert.ok(!proc.args.join(' ').includes(SECRET), `the TURN secret is on a command line: ${proc.args.join(' ')}`);
    for (const proc of [coturn, proxy]) {
      const environ = readFileSync(`/proc/${proc.pid}/environ`, 'utf8');
      assert.ok(!environ.includes(SECRET) && !environ.includes('SVC_TURN_SECRET'), `the platform's settings are in ${proc.args[0]}'s environment`);
    }
    const configFile = coturn.args[coturn.args.indexOf('-c') + 1];
    assert.equal(statSync(configFile).mode & 0o777, 0o600);
    assert.ok(configFile.startsWith(served.dataDir), `the file holding the secret is in the data dir, not ${configFile}`);
    assert.match(readFileSync(configFile, 'utf8'), new RegExp(`^static-auth-secret=${SECRET}$`, 'm'));

    assert.deepEqual(listeningAddresses(Number(env.SVC_DEMO_PROXY_PORT)), ['0100007F'], 'the demo proxy listens on 127.0.0.1 only');

    await served.kill9();
    await until('coturn and the demo proxy to end with the platform', async () => helpers.every((proc) => !isAlive(proc.pid)));

    await served.restart();
    const again = descendantsOf(served.process.pid!);
    assert.ok(again.some(isCoturn), 'a new coturn');
    assert.ok(again.some(isDemoProxy), 'a new demo proxy');
    const socket = net.connect(Number(env.SVC_DEMO_PROXY_PORT), '127.0.0.1');
    await once(socket, 'connect');
    socket.destroy();
  });

  test('coturn and the demo proxy left running by a kill -9 of the platform and of their watchdogs are ended at the next start', async (t) => {
    const env = await auxiliaryEnv();
    const served = await servePlatform(env, { args: ['--samples'] });
    t.after(() => served.stop());
    const helpers = descendantsOf(served.process.pid!);
    const stale = helpers.filter((proc) => isCoturn(proc) || isDemoProxy(proc));
    assert.equal(stale.length, 2, JSON.stringify(helpers));
    // Should the platform fail to end them, they must not outlive the test (they hold its output pipe).
    t.after(() => stale.filter((proc) => isAlive(proc.pid)).forEach((proc) => process.kill(proc.pid, 'SIGKILL')));

    // The platform and the watchdogs (/bin/sh and its watcher subshell) die together, so nothing is left to
    // end the programs or to remove their pid files: the platform is stopped first (it cannot see its
    // watchdogs go), then the watchdogs are killed, then the platform.
    process.kill(served.process.pid!, 'SIGSTOP');
    for (const proc of helpers.filter((proc) => proc.args[0] === '/bin/sh')) process.kill(proc.pid, 'SIGKILL');
    await served.kill9();
    assert.ok(stale.every((proc) => isAlive(proc.pid)), 'coturn and the demo proxy outlive the platform and their watchdogs');

    await served.restart();
    for (const proc of stale) assert.ok(!isAlive(proc.pid), `the stale ${proc.args.join(' ')} is still running`);
    const again = descendantsOf(served.process.pid!);
    assert.ok(again.some(isCoturn) && again.some(isDemoProxy), JSON.stringify(again));
    assert.ok(await stunAnswers('127.0.0.1', Number(env.SVC_TURN_PORT)), 'the new coturn answers STUN');
    const socket = net.connect(Number(env.SVC_DEMO_PROXY_PORT), '127.0.0.1');
    await once(socket, 'connect');
    socket.destroy();
  });

  test('a watchdog killed on its own while the platform runs takes its program with it (nothing is left untracked)', async (t) => {
    const served = await servePlatform(await auxiliaryEnv(), { args: ['--samples'] });
    t.after(() => served.stop());
    const helpers = descendantsOf(served.process.pid!);
    const coturn = helpers.find(isCoturn);
    assert.ok(coturn, JSON.stringify(helpers));
    t.after(() => isAlive(coturn.pid) && process.kill(coturn.pid, 'SIGKILL'));
    for (const proc of helpers.filter((proc) => proc.args[0] === '/bin/sh' && proc.args.includes(COTURN))) process.kill(proc.pid, 'SIGKILL');
    await until('coturn to end with its watchdog', async () => !isAlive(coturn.pid));
  });

  test('a demo proxy port already taken stops svc serve with one line, and leaves nothing running', async () => {
    const taken = net.createServer().listen(0, '127.0.0.1');
    await once(taken, 'listening');
    try {
      const env: NodeJS.ProcessEnv = { ...process.env, ...await auxiliaryEnv(), SVC_DEMO_PROXY_PORT: String((taken.address() as net.AddressInfo).port), SVC_PORT: '0', SVC_HOST: '127.0.0.1', SVC_DATA_DIR: tempDir() };
      const child = execFile(process.execPath, [svcBin, 'serve', '--samples'], { env });
      let stderr = '';
      child.stderr!.on('data', (chunk) => { stderr += chunk; });
      const [code] = await once(child, 'exit');
      assert.equal(code, 1);
      assert.equal(stderr.trim().split('\n').length, 1, stderr);
      assert.match(stderr, /^svc serve: the demo proxy cannot listen on 127\.0\.0\.1:\d+ .*SVC_DEMO_PROXY_PORT.*: the port is in use$/m);
      // The process has exited; coturn, which had started before the proxy, must be gone too: its port is free.
      const udp = dgram.createSocket('udp4');
      udp.bind(Number(env.SVC_TURN_PORT), '127.0.0.1');
      await once(udp, 'listening');
      udp.close();
    } finally {
      taken.close();
    }
  });
});
