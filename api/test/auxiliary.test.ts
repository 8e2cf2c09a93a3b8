// The platform's auxiliary processes on a real `svc serve --samples`: coturn and the demo proxy end
// with the platform even on kill -9, start again after it, keep the TURN secret off command lines, and
// the demo proxy listens on loopback and fails fast on a taken port.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import dgram from 'node:dgram';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';
import { describe, test } from 'node:test';
import { tempDir } from './helpers/databases.ts';
import { descendantsOf, isAlive } from './helpers/processes.ts';
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

describe('auxiliary processes of svc serve --samples', { skip }, () => {
  test('coturn and the demo proxy: secret in a 0600 file, proxy on loopback, both gone after kill -9, both back after a restart', async (t) => {
    const env = await auxiliaryEnv();
    const served = await servePlatform(env, { args: ['--samples'] });
    t.after(() => served.stop());
    const helpers = descendantsOf(served.process.pid!);
    const coturn = helpers.find((proc) => proc.args[0] === COTURN);
    const proxy = helpers.find((proc) => proc.args.some((arg) => arg.endsWith('proxy/src/main.ts')));
    assert.ok(coturn && proxy, JSON.stringify(helpers));

    for (const proc of helpers) assert.ok(!proc.args.join(' ').includes(SECRET), `the TURN secret is on a command line: ${proc.args.join(' ')}`);
    const configFile = coturn.args[coturn.args.indexOf('-c') + 1];
    assert.equal(statSync(configFile).mode & 0o777, 0o600);
    assert.match(readFileSync(configFile, 'utf8'), new RegExp(`^static-auth-secret=${SECRET}$`, 'm'));

    assert.deepEqual(listeningAddresses(Number(env.SVC_DEMO_PROXY_PORT)), ['0100007F'], 'the demo proxy listens on 127.0.0.1 only');

    await served.kill9();
    await until('coturn and the demo proxy to end with the platform', async () => helpers.every((proc) => !isAlive(proc.pid)));

    await served.restart();
    const again = descendantsOf(served.process.pid!);
    assert.ok(again.some((proc) => proc.args[0] === COTURN), 'a new coturn');
    assert.ok(again.some((proc) => proc.args.some((arg) => arg.endsWith('proxy/src/main.ts'))), 'a new demo proxy');
    const socket = net.connect(Number(env.SVC_DEMO_PROXY_PORT), '127.0.0.1');
    await once(socket, 'connect');
    socket.destroy();
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
