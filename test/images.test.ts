// The images `npm run images` builds, as built: each runs as a non-root user, carries no development
// dependencies, has a HEALTHCHECK where one means something (none on the streaming container, whose ready
// check answers 500 for a whole session by design), and the streaming image has what a captured X11
// application needs. Whether they run is proven by the container, compose and runtime tests.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { image, needsPodman, podmanEnv } from '../api/test/helpers/podman.ts';
import { until } from '../api/test/helpers/wait.ts';

const run = promisify(execFile);
const SAMPLES = ['echo', 'slow', 'sse', 'error', 'task-progress'];
const ALL = ['platform', 'proxy', 'streaming-app', ...SAMPLES];
const skip = needsPodman(ALL.map(image), 'the image checks');
const REPO = path.resolve(import.meta.dirname, '..');
const podman = (...args: string[]) => run('podman', args, { env: podmanEnv() });

async function inspect(name: string): Promise<{ User: string; Healthcheck?: { Test: string[] }; Size: number }> {
  const { stdout } = await podman('image', 'inspect', image(name));
  return JSON.parse(stdout)[0];
}

/** Runs a shell command in the image (as its own user) and returns its output. */
async function inside(name: string, script: string): Promise<string> {
  const { stdout } = await podman('run', '--rm', '--network', 'none', '--entrypoint', 'sh', image(name), '-c', script);
  return stdout.trim();
}

describe('the project\'s images', { skip }, () => {
  test('every image runs as the non-root user node; health checks where they mean something', async () => {
    for (const name of ALL) {
      const info = await inspect(name);
      assert.equal(info.User, 'node', `${name} runs as node`);
      const check = info.Healthcheck?.Test ?? [];
      if (name === 'streaming-app') assert.equal(check.length, 0, 'no HEALTHCHECK on the streaming container');
      else if (name === 'task-progress') assert.deepEqual(check, ['NONE'], 'a task serves nothing to check');
      else assert.match(check.join(' '), /healthcheck\.mjs/, `${name} has a HEALTHCHECK`);
    }
  });

  test('no development dependencies, and sizes that say so', async () => {
    for (const [name, dir] of [['platform', 'api'], ['proxy', 'proxy'], ['streaming-app', 'streaming-app']]) {
      // The root's devDependencies. Not @types/node: protobufjs and @grpc/grpc-js (the OpenTelemetry
      // exporters') declare it among their own dependencies, so a production install has it.
      const present = (await inside(name, 'ls -d node_modules/* node_modules/@*/*')).split('\n');
      for (const dev of ['typescript', 'playwright-core', 'autocannon', 'ajv', '@apidevtools/swagger-parser']) {
        assert.ok(!present.includes(`node_modules/${dev}`), `${name} has no ${dev}`);
      }
      assert.equal(await inside(name, `test -d ${dir}/test && echo present || echo absent`), 'absent', `${name} carries no tests`);
    }
    // Debian minbase and Node.js 24 are most of it (the node binary alone is ~125 MB).
    for (const name of ['platform', 'proxy', ...SAMPLES]) assert.ok((await inspect(name)).Size < 300e6, `${name} under 300 MB`);
  });

  test('the streaming image has the encoder, an X server, PulseAudio and a demo application', async () => {
    const found = await inside('streaming-app', 'for tool in ffmpeg Xvfb pulseaudio xterm; do command -v $tool; done');
    assert.deepEqual(found.split('\n').map((file) => file.split('/').at(-1)), ['ffmpeg', 'Xvfb', 'pulseaudio', 'xterm']);
    assert.match(await inside('streaming-app', 'ffmpeg -hide_banner -encoders'), /libx264/);
  });

  test('the Dockerfile of "Put your application here" (docs/streaming-app.md) builds on the streaming image and starts its app', async (t) => {
    const docs = readFileSync(path.join(REPO, 'docs/streaming-app.md'), 'utf8');
    const block = /## Put your application here[\s\S]*?```dockerfile\n([\s\S]*?)\n\s*```/.exec(docs)?.[1];
    assert.ok(block, 'the page has the Dockerfile');
    const dockerfile = block.replace(/^ {3}/gm, '');
    // The image it starts from is the one scripts/images.sh tags (by default; a build may use another tag).
    assert.match(readFileSync(path.join(REPO, 'scripts/images.sh'), 'utf8'), /TAG="\$\{SVC_IMAGE_TAG:-dev\}"[\s\S]*build "localhost\/svc\/streaming-app:\$TAG"/);
    assert.equal(dockerfile.split('\n')[0], 'FROM localhost/svc/streaming-app:dev');

    const context = mkdtempSync(path.join(tmpdir(), 'svc-my-app-'));
    t.after(() => rmSync(context, { recursive: true, force: true }));
    writeFileSync(path.join(context, 'Dockerfile'), dockerfile);
    mkdirSync(path.join(context, 'my-app'));
    writeFileSync(path.join(context, 'my-app/start'), '#!/bin/sh\nexec xterm -geometry "80x24+0+0"\n');
    chmodSync(path.join(context, 'my-app/start'), 0o755);
    const tag = 'localhost/svc-test/my-app-stream:test';
    await podman('build', '--quiet', '--isolation', 'chroot', '--network', 'host', '--from', image('streaming-app'), '--tag', tag, context);
    t.after(() => podman('rmi', '--force', tag));

    const { stdout: id } = await podman('run', '--detach', '--network', 'none', '--env', 'STREAMING_BIND_ADDRESS=127.0.0.1', tag);
    t.after(() => podman('rm', '--force', id.trim()));
    const logs = await until('the container listening', async () => {
      const { stdout } = await podman('logs', id.trim());
      return /streaming app listening/.test(stdout) ? stdout : undefined;
    }, 60_000);
    assert.match(logs, /"source":"x11"/, 'the x11 source, as the Dockerfile says');
    assert.match(logs, /application window mapped/, 'the app it copied in started and showed a window');
  });
});
