// Configuration from the environment: defaults, parsing, and the one-line failure on a bad value.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.ts';
import { MAIN } from './helpers.ts';

test('defaults follow spec §4.6', () => {
  const config = loadConfig({ STREAMING_BIND_ADDRESS: '192.0.2.10' });
  assert.equal(config.controlPort, 8011);
  assert.equal(config.streamingPort, 49100);
  assert.equal(config.startEndpoint, '/sign_in');
  assert.deepEqual(config.portRange, { min: 47998, max: 48020 });
  assert.equal(config.resumeWindowMs, 60_000);
  assert.equal(config.bindAddress, '192.0.2.10');
  assert.equal(config.encoder, 'auto');
  assert.deepEqual([config.width, config.height, config.fps], [1280, 720, 60]);
  assert.equal(config.degradation, 'balanced');
});

test('values are read from the environment; blanks count as unset', () => {
  const config = loadConfig({
    CONTROL_SERVER_PORT: '9000', STREAMING_SERVER_PORT: '9001', STREAMING_START_ENDPOINT: '/stream/start',
    STREAMING_PORT_BINDING_RANGE: ' 48000 - 48010 ', STREAMING_RESUME_WINDOW_SECONDS: '300', STREAMING_VIDEO_SIZE: '1920x1080',
    STREAMING_ENCODER: 'libvpx', STREAMING_SERVE_CLIENT: 'false', STREAMING_BIND_ADDRESS: '10.0.0.5', LOG_LEVEL: '',
    STREAMING_DEGRADATION: 'maintain-resolution',
  });
  assert.equal(config.degradation, 'maintain-resolution');
  assert.equal(config.controlPort, 9000);
  assert.equal(config.startEndpoint, '/stream/start');
  assert.deepEqual(config.portRange, { min: 48000, max: 48010 });
  assert.equal(config.resumeWindowMs, 300_000);
  assert.deepEqual([config.width, config.height], [1920, 1080]);
  assert.equal(config.encoder, 'libvpx');
  assert.equal(config.serveClient, false);
  assert.equal(config.logLevel, 'info');
});

test('bad values are rejected naming the variable', () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ STREAMING_PORT_BINDING_RANGE: '48010-48000' }, /STREAMING_PORT_BINDING_RANGE/],
    [{ STREAMING_PORT_BINDING_RANGE: '48000' }, /STREAMING_PORT_BINDING_RANGE/],
    [{ STREAMING_RESUME_WINDOW_SECONDS: '301' }, /STREAMING_RESUME_WINDOW_SECONDS/],
    [{ CONTROL_SERVER_PORT: 'http' }, /CONTROL_SERVER_PORT/],
    [{ STREAMING_VIDEO_SIZE: '1281x720' }, /STREAMING_VIDEO_SIZE/],
    [{ STREAMING_START_ENDPOINT: 'sign_in' }, /STREAMING_START_ENDPOINT/],
    [{ STREAMING_BIND_ADDRESS: '::1' }, /STREAMING_BIND_ADDRESS/],
    [{ STREAMING_DEGRADATION: 'keep-sharpness' }, /STREAMING_DEGRADATION/],
    [{ CONTROL_SERVER_PORT: '9000', STREAMING_SERVER_PORT: '9000' }, /must differ/],
  ];
  for (const [env, message] of cases) {
    assert.throws(() => loadConfig({ STREAMING_BIND_ADDRESS: '192.0.2.10', ...env }), (error: unknown) =>
      error instanceof ConfigError && message.test(error.message), JSON.stringify(env));
  }
});

test('the process stops at once with exactly one readable line on stderr', async () => {
  const child = spawn(process.execPath, [MAIN], {
    env: { ...process.env, STREAMING_PORT_BINDING_RANGE: '48010-48000' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  let stdout = '';
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  assert.equal(code, 1);
  assert.equal(stdout, '');
  const lines = stderr.trim().split('\n');
  assert.equal(lines.length, 1, stderr);
  assert.match(lines[0], /^streaming-app: invalid configuration: STREAMING_PORT_BINDING_RANGE: /);
});

test('the frame source: auto streams the app when it and Xvfb can be found, else the scene; x11 and pipe need an app', () => {
  const base = { STREAMING_BIND_ADDRESS: '192.0.2.10' };
  const noTools = { ...base, PATH: '/nonexistent' };
  assert.equal(loadConfig(noTools).source.kind, 'scene', 'no app command: the test scene');
  const fallback = loadConfig({ ...noTools, STREAMING_APP_COMMAND: 'xterm' });
  assert.equal(fallback.source.kind, 'scene');
  assert.match(fallback.source.reason, /Xvfb is not installed/);
  assert.equal(fallback.appCommand, undefined);
  const existing = loadConfig({ ...noTools, STREAMING_APP_COMMAND: `exec ${process.execPath}`, STREAMING_DISPLAY: ':3' });
  assert.deepEqual([existing.source.kind, existing.display, existing.barcode, existing.audio.enabled], ['x11', ':3', false, false]);
  assert.equal(loadConfig({ ...noTools, STREAMING_SOURCE: 'pipe', STREAMING_APP_COMMAND: 'renderer' }).source.kind, 'pipe');
  assert.equal(loadConfig(noTools).barcode, true, 'the scene carries the barcode by default');
  // With a display to be had, auto also wants the command's program (npm start's demo on a machine
  // with Xvfb but no xterm); builtins and anything beyond a plain command are left to the shell.
  const withXvfb = { ...noTools, XVFB_PATH: process.execPath };
  const noProgram = loadConfig({ ...withXvfb, STREAMING_APP_COMMAND: 'exec no-such-app-xyz -geometry 80x24' });
  assert.equal(noProgram.source.kind, 'scene');
  assert.match(noProgram.source.reason, /starts no-such-app-xyz, which is not installed/);
  for (const command of [`exec ${process.execPath} app.js`, "trap 'exit 3' USR1; no-such-app-xyz", 'FOO=1 no-such-app-xyz', '"$APP"']) {
    assert.equal(loadConfig({ ...withXvfb, STREAMING_APP_COMMAND: command }).source.kind, 'x11', command);
  }

  const cases: [Record<string, string>, RegExp][] = [
    [{ STREAMING_SOURCE: 'desktop' }, /STREAMING_SOURCE/],
    [{ STREAMING_SOURCE: 'x11' }, /STREAMING_APP_COMMAND: required with STREAMING_SOURCE=x11/],
    [{ STREAMING_SOURCE: 'pipe', STREAMING_APP_COMMAND: ' ' }, /STREAMING_APP_COMMAND: required/],
    [{ STREAMING_SOURCE: 'x11', STREAMING_APP_COMMAND: 'xterm' }, /x11 needs Xvfb/],
    [{ STREAMING_DISPLAY: 'localhost' }, /STREAMING_DISPLAY/],
    [{ STREAMING_AUDIO: 'true' }, /STREAMING_AUDIO: the test scene has no sound/],
    [{ STREAMING_SOURCE: 'pipe', STREAMING_APP_COMMAND: 'r', STREAMING_AUDIO: 'true' }, /STREAMING_AUDIO: needs PulseAudio/],
    [{ STREAMING_FRAME_PIPE: 'relative/path' }, /STREAMING_FRAME_PIPE/],
  ];
  for (const [env, message] of cases) {
    assert.throws(() => loadConfig({ ...noTools, ...env }), (error: unknown) => error instanceof ConfigError && message.test(error.message), JSON.stringify(env));
  }
});
