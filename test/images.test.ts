// The images `npm run images` builds, as built: each runs as a non-root user, carries no development
// dependencies, has a HEALTHCHECK where one means something (none on the streaming container, whose ready
// check answers 500 for a whole session by design), and the streaming image has what a captured X11
// application needs. Whether they run is proven by the container, compose and runtime tests.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { image, needsPodman, podmanEnv } from '../api/test/helpers/podman.ts';

const run = promisify(execFile);
const SAMPLES = ['echo', 'slow', 'sse', 'error', 'task-progress'];
const ALL = ['platform', 'proxy', 'streaming-app', ...SAMPLES];
const skip = needsPodman(ALL.map(image), 'the image checks');

async function inspect(name: string): Promise<{ User: string; Healthcheck?: { Test: string[] }; Size: number }> {
  const { stdout } = await run('podman', ['image', 'inspect', image(name)], { env: podmanEnv() });
  return JSON.parse(stdout)[0];
}

/** Runs a shell command in the image (as its own user) and returns its output. */
async function inside(name: string, script: string): Promise<string> {
  const { stdout } = await run('podman', ['run', '--rm', '--network', 'none', '--entrypoint', 'sh', image(name), '-c', script], { env: podmanEnv() });
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
      // The root's devDependencies (a dependency may itself depend on some @types, so those are named).
      const present = (await inside(name, 'ls -d node_modules/* node_modules/@*/*')).split('\n');
      for (const dev of ['typescript', 'playwright-core', '@types/node', 'autocannon', 'ajv', '@apidevtools/swagger-parser']) {
        assert.ok(!present.includes(`node_modules/${dev}`), `${name} has no ${dev}`);
      }
      assert.equal(await inside(name, `test -d ${dir}/test && echo present || echo absent`), 'absent', `${name} carries no tests`);
    }
    // Debian minbase and Node.js 24 are most of it (the node binary alone is ~125 MB).
    for (const name of ['platform', 'proxy', ...SAMPLES]) assert.ok((await inspect(name)).Size < 300e6, `${name} under 300 MB`);
  });

  test('the streaming image has the encoder, an X server, PulseAudio, xdotool and a demo application', async () => {
    const found = await inside('streaming-app', 'for tool in ffmpeg Xvfb pulseaudio xdotool xterm; do command -v $tool; done');
    assert.deepEqual(found.split('\n').map((file) => file.split('/').at(-1)), ['ffmpeg', 'Xvfb', 'pulseaudio', 'xdotool', 'xterm']);
    assert.match(await inside('streaming-app', 'ffmpeg -hide_banner -encoders'), /libx264/);
  });
});
