// `svc task …` against a running platform: the commands are run as the CLI runs them (parsed options,
// the saved task key), only their output is captured. launch (flags and --file) → get → events →
// results --download → cancel → delete, and the one-line failures.
import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parseArgs } from 'node:util';
import { taskCommands } from '../src/cli/commands/tasks.ts';
import type { CommandContext } from '../src/cli/command.ts';
import type { CliState } from '../src/cli/state.ts';
import { hasStatus, TASK_KEY_SCOPES, taskBody, waitForTask } from './compute/tasks-fixtures.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { tempDir } from './helpers/databases.ts';

describe('svc task commands', () => {
  let svc: TestPlatform;
  let state: CliState;
  const dir = tempDir('svc-task-cli-');

  /** Runs `svc task <name> <args…>` (without the global options) and returns what it printed. */
  async function svcTask(name: string, args: string[], json = false): Promise<string> {
    const command = taskCommands[`task ${name}`];
    const parsed = parseArgs({ args, options: { ...command.options }, allowPositionals: true, strict: true });
    const printed: string[] = [];
    const context: CommandContext = {
      values: parsed.values, positionals: parsed.positionals, env: {}, state,
      print: (human, data) => printed.push(json ? JSON.stringify(data) : human),
    };
    await command.run(context);
    return printed.join('\n');
  }

  before(async () => {
    svc = await startTestPlatform({ config: { tasks: { schedulerIntervalMs: 100 } } });
    const key = await svc.apiKey(await svc.token(), TASK_KEY_SCOPES, { task: true });
    state = { server: svc.url, gatewayAddress: 'localhost', taskApiKey: key };
  });
  after(async () => {
    await svc.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('launch with flags → get → events → results --download', async () => {
    const launched = JSON.parse(await svcTask('launch', [
      '--name', 'cli', '--image', 'local/task-progress:1', '--gpu', 'LOCAL', '--instance-type', 'LOCAL.CPU_1x',
      '--env', 'TASK_STEPS=2', '--env', 'TASK_STEP_MS=20', '--secret', 'TOKEN=cli-secret-value', '--grace', 'PT1S',
    ], true)).task;
    assert.equal(launched.status, 'QUEUED');
    assert.deepEqual(launched.secrets, ['TOKEN']);
    await waitForTask(svc.api, state.taskApiKey!, launched.id, hasStatus('COMPLETED'));

    const shown = await svcTask('get', [launched.id]);
    assert.match(shown, /status\s+COMPLETED/);
    assert.match(shown, /percentComplete\s+100/);
    assert.match(await svcTask('events', [launched.id]), /Changing status from 'RUNNING' to 'COMPLETED'/);
    const listed = await svcTask('results', [launched.id]);
    assert.match(listed, /result\.txt/);
    assert.match(listed, /steps\/log\.csv/);

    const saved = await svcTask('results', [launched.id, '--download', dir]);
    assert.match(saved, /Saved 2 file\(s\)/);
    assert.equal(readFileSync(path.join(dir, 'result.txt'), 'utf8'), 'counted to 2 of 2\n');
    assert.match(readFileSync(path.join(dir, 'steps', 'log.csv'), 'utf8'), /^step,at\n1,20\n2,40\n$/);
    assert.match(await svcTask('list', ['--status', 'completed']), /cli\s+COMPLETED\s+100/);
  });

  test('launch --file, cancel, delete; failures are one clear line', async () => {
    const file = path.join(dir, 'task.json');
    writeFileSync(file, JSON.stringify(taskBody({ name: 'from-file' }, { TASK_STEPS: '1000' })));
    const launched = JSON.parse(await svcTask('launch', ['--file', file], true)).task;
    assert.equal(launched.name, 'from-file');
    assert.match(await svcTask('cancel', [launched.id]), new RegExp(`Task ${launched.id} is CANCELED`));
    assert.equal(await svcTask('delete', [launched.id]), `Deleted task ${launched.id}`);
    await assert.rejects(svcTask('get', [launched.id]), new RegExp(`GET /v1/svct/tasks/${launched.id} failed \\(404\\): Task id '${launched.id}': not found`));
    await assert.rejects(svcTask('launch', ['--name', 'x', '--image', 'local/task-progress', '--gpu', 'LOCAL']),
      /failed \(400\): Validation failed: gpuSpecification.instanceType/);
    await assert.rejects(svcTask('launch', ['--env', 'NOEQUALS']), /--env takes NAME=VALUE/);
    const saved = state.taskApiKey;
    state.taskApiKey = undefined;
    await assert.rejects(svcTask('list', []), /no task key: run `svc api-key generate --task`/);
    state.taskApiKey = saved;
  });
});
