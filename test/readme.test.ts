// README's first steps as a person runs them from another directory, in a fresh shell: every CLI line of
// its walk-through goes through the clone's `svc` wrapper (the path the banner prints) to the platform
// `npm start` runs, and nothing ever asks the npm registry (`npx svc` outside the clone would fetch and
// run an unrelated package of that name, the bootstrap secret on its command line). A SIGTERM to npm, as
// a process manager sends it, ends the platform and everything it started.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { descendantsOf, isAlive } from '../api/test/helpers/processes.ts';
import { freePort, until } from '../api/test/helpers/wait.ts';
import { freeUdpRange } from '../streaming-app/test/helpers.ts';

const REPO = path.resolve(import.meta.dirname, '..');
const DOCS = ['README.md', ...readdirSync(path.join(REPO, 'docs')).filter((name) => name.endsWith('.md')).map((name) => `docs/${name}`)];

/** The lines of a document's fenced shell blocks, continuation lines joined. */
function shellLines(file: string): string[] {
  const blocks = [...readFileSync(path.join(REPO, file), 'utf8').matchAll(/```(?:sh|bash|shell)?\n([\s\S]*?)```/g)];
  return blocks.flatMap(([, body]) => body.replace(/\\\n\s*/g, ' ').split('\n')).map((line) => line.trim()).filter(Boolean);
}

describe("README's commands from another directory", () => {
  const home = mkdtempSync(path.join(os.tmpdir(), 'svc-readme-'));
  const elsewhere = mkdtempSync(path.join(os.tmpdir(), 'svc-elsewhere-'));
  const registryRequests: string[] = [];
  const registry = http.createServer((request, response) => {
    registryRequests.push(`${request.method} ${request.url}`);
    response.writeHead(404).end();
  });
  let banner = '';
  let port = 0;
  let npm: ReturnType<typeof spawn>;
  let stop = async () => {};

  before(async () => {
    await new Promise<void>((resolve) => registry.listen(0, '127.0.0.1', resolve));
    const udp = await freeUdpRange(12);
    port = await freePort();
    // npm as `npm test` runs it, else the one on PATH.
    const [command, args] = process.env.npm_execpath ? [process.execPath, [process.env.npm_execpath, 'start']] : ['npm', ['start']];
    npm = spawn(command, args, {
      cwd: REPO,
      env: {
        PATH: process.env.PATH, HOME: home, SVC_DATA_DIR: path.join(home, 'data'), SVC_HOST: '127.0.0.1',
        SVC_PORT: String(port), npm_config_update_notifier: 'false', npm_config_registry: `http://127.0.0.1:${(registry.address() as { port: number }).port}/`,
        SVC_DEMO_PROXY_PORT: String(await freePort()),
        SVC_AGENT_UDP_PORT_RANGE: `${udp.min}-${udp.max}`, SVC_TURN_SERVER: 'none', SVC_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => npm.once('exit', resolve));
    stop = async () => { npm.kill('SIGTERM'); await exited; };
    npm.stdout!.on('data', (chunk: Buffer) => { banner += chunk; });
    await until('the banner with the next step', async () => /Next: .*\n/.test(banner), 90_000);
  });

  after(async () => {
    await stop();
    registry.close();
    rmSync(home, { recursive: true, force: true });
    rmSync(elsewhere, { recursive: true, force: true });
  });

  test('no document runs a command through npx or npm exec (either may fetch a package from the registry)', () => {
    const offending = DOCS.flatMap((file) => shellLines(file).filter((line) => /(^|[;&|]\s*)(npx|npm (exec|x))\s/.test(line)).map((line) => `${file}: ${line}`));
    assert.deepEqual(offending, []);
  });

  test("the walk-through's CLI lines succeed through the path the banner names, and the registry is never asked", () => {
    const [, svc, secret] = /Next: (\S+) init --secret (\S+)/.exec(banner)!;
    assert.equal(svc, path.join(REPO, 'svc'), 'from another directory the banner names the wrapper by its absolute path');
    const lines = shellLines('README.md').filter((line) => line.startsWith('./svc '));
    assert.ok(lines.some((line) => line.startsWith('./svc task launch')), `README launches a task: ${lines.join('\n')}`);
    for (const line of lines) {
      const command = line.replace(/\s+#.*$/, '').replace(/^\.\/svc/, svc).replace('<bootstrap secret>', secret)
        .replace(/ (samples\/\S+)/g, (_, file) => ` ${path.join(REPO, file)}`);
      const run = spawnSync('sh', ['-c', command], {
        cwd: elsewhere, encoding: 'utf8', timeout: 60_000,
        // A fresh shell: no Node of ours on PATH (the wrapper finds it), npm's registry is the recorder.
        env: { PATH: '/usr/bin:/bin', HOME: home, SVC_PORT: String(port), npm_config_registry: `http://127.0.0.1:${(registry.address() as { port: number }).port}/` },
      });
      assert.equal(run.status, 0, `${line}\n${run.stdout}${run.stderr}`);
    }
    assert.deepEqual(registryRequests, []);
  });

  test('a SIGTERM to npm ends the platform, its sandboxes and its auxiliary processes', async () => {
    const started = descendantsOf(npm.pid!);
    assert.ok(started.some((proc) => proc.args.includes('serve')), `svc serve runs below npm: ${JSON.stringify(started)}`);
    await stop();
    await until('every process npm start started gone', async () => started.every((proc) => !isAlive(proc.pid)) || undefined, 60_000)
      .catch(() => assert.fail(`left behind: ${started.filter((proc) => isAlive(proc.pid)).map((proc) => `${proc.pid} ${proc.args.at(-1)}`).join(', ')}`));
  });
});
