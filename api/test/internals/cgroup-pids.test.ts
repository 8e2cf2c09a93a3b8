// An instance cgroup's process list as the kernel writes it can hold a 0 (a process it cannot name in our
// pid namespace, such as one exiting after an out-of-memory kill). Signalling it must never become kill(0),
// which would signal the agent's own process group (it once took a whole CI run down).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { InstanceCgroup } from '../../src/compute/sandbox/cgroups.ts';

test('pids() and signal() skip the 0 the kernel lists for a process it cannot name; real pids are signalled', async (t) => {
  const base = await mkdtemp(path.join(os.tmpdir(), 'svc-cgroup-'));
  t.after(() => rm(base, { recursive: true, force: true }));
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  const exited = once(child, 'exit');
  const cgroup = new InstanceCgroup({ version: 2, bases: [base] }, 'i-test');
  await mkdir(cgroup.dirs[0]);
  // The file a cgroup v2 directory holds, with the kernel's 0 first.
  await writeFile(path.join(cgroup.dirs[0], 'cgroup.procs'), `0\n${child.pid}\n\n`);
  assert.deepEqual(await cgroup.pids(), [child.pid]);
  await cgroup.signal('SIGTERM');
  const [, signal] = await exited;
  assert.equal(signal, 'SIGTERM', 'the real process got the signal, and this one (in the same group) is still here');
});
