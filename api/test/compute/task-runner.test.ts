// The agent's task runner on its own, through the real process runtime: what a task receives (its
// environment, secrets file, directories; no ports), progress, the secrets file refreshed while it runs,
// result upload over HTTP to a stand-in of the control plane's endpoint, a refused upload, and the
// desired-set rules (a dropped task is stopped and forgotten; a re-sent set starts nothing twice).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { TaskReport, TaskSpec } from '../../src/compute/protocol.ts';
import { createProcessRuntime } from '../../src/compute/runtimes/process.ts';
import { startTaskRunner, type TaskRunner } from '../../src/compute/task-runner.ts';
import { httpResultUploader } from '../../src/compute/task-results.ts';
import { captureLog, eventually, tempDir } from './helpers.ts';

const CATALOG = fileURLToPath(new URL('./fixtures/tasks.yaml', import.meta.url));
let serial = 0;

function spec(image: string, overrides: Partial<TaskSpec> = {}): TaskSpec {
  const n = ++serial;
  return {
    taskId: `task-${process.pid}-${n}`, instanceId: `inst-${process.pid}-${n}`, ncaId: 'nca-test', name: `t${n}`, gpu: 'LOCAL',
    instanceType: 'LOCAL.CPU_1x', backend: 'svc-local', containerImage: image, containerEnvironment: [], secrets: [],
    terminationGracePeriodMs: 500, resultHandlingStrategy: 'UPLOAD', revision: 1, ...overrides,
  };
}

/** A stand-in of the control plane's upload endpoint: records each PUT; answers `status`. */
async function uploadServer(status = 200) {
  const received: { url: string; authorization?: string; host?: string; sha256: string; body: string }[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      received.push({ url: req.url!, authorization: req.headers.authorization, host: req.headers.host, sha256: createHash('sha256').update(body).digest('hex'), body: body.toString() });
      res.writeHead(status, { 'content-type': 'application/problem+json' }).end(JSON.stringify({ status, detail: status === 200 ? 'ok' : 'too large' }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received, close: () => new Promise((resolve) => server.close(resolve)) };
}

describe('task runner', () => {
  let state: Awaited<ReturnType<typeof tempDir>>;
  let control: Awaited<ReturnType<typeof uploadServer>>;
  let runner: TaskRunner;
  const reports: TaskReport[] = [];
  const finalOf = (taskId: string) => eventually(() => reports.find((report) => report.taskId === taskId
    && ['COMPLETED', 'ERRORED', 'EXCEEDED_MAX_RUNTIME_DURATION', 'STOPPED'].includes(report.state)), `${taskId} ended`);

  before(async () => {
    state = await tempDir('task-runner');
    control = await uploadServer();
    const { log } = captureLog();
    runner = await startTaskRunner({
      runtime: createProcessRuntime({ catalogFile: CATALOG, stateDir: state.dir, log }), stateDir: state.dir, log, progressIntervalMs: 50,
      uploader: httpResultUploader({ server: control.url, credential: 'svcagent-test', apiHost: 'api.example:443' }),
      retry: { initialMs: 50, maxMs: 200 },
    });
    runner.onReport((report) => reports.push(report));
  });
  after(async () => {
    await runner.stop(0);
    await control.close();
    await state.remove();
  });

  test('a task gets its environment, a 0600 secrets file refreshed on update, no ports; its results are uploaded', async () => {
    const waitFile = path.join(state.dir, 'go');
    const first = spec('test/task-env', {
      containerEnvironment: [{ key: 'TASK_WAIT_FILE', value: waitFile }, { key: 'MINE', value: 'yes' }],
      secrets: [{ name: 'TOKEN', value: 's3cret-one' }, { name: 'with.dot', value: { a: 1 } }],
    });
    runner.applyDesired([first.taskId], [first]);
    runner.applyDesired([first.taskId], [first]); // a re-sent set starts nothing twice
    const progressed = await eventually(() => reports.find((report) => report.taskId === first.taskId && report.percentComplete === 50), 'progress 50');
    assert.equal(progressed.state, 'RUNNING');
    assert.ok(progressed.lastHeartbeatAt);
    runner.applyDesired([first.taskId], [{ ...first, revision: 2, secrets: [{ name: 'TOKEN', value: 's3cret-two' }] }]);
    const secretsFile = path.join(state.dir, 'tasks', `t-${first.taskId}`, 'secrets.json');
    await eventually(() => (readFileSync(secretsFile, 'utf8').includes('s3cret-two') ? true : undefined), 'secrets file refreshed');
    writeFileSync(waitFile, '');
    const final = await finalOf(first.taskId);
    assert.equal(final.state, 'COMPLETED', JSON.stringify(final));
    assert.equal(final.results, 2);
    assert.equal(final.percentComplete, 50);
    assert.equal(reports.filter((report) => report.taskId === first.taskId && report.state === 'STARTING').length, 1);

    const byName = new Map(control.received.map((upload) => [new URL(upload.url, 'http://x').searchParams.get('name'), upload]));
    const envUpload = byName.get('env.json')!;
    assert.equal(new URL(envUpload.url, 'http://x').pathname, `/v1/agents/tasks/${first.taskId}/results`);
    assert.equal(envUpload.authorization, 'Bearer svcagent-test');
    assert.equal(envUpload.host, 'api.example:443');
    const received = JSON.parse(envUpload.body) as { env: Record<string, string>; secretsFile: unknown; secretsMode: number };
    const workDir = path.join(state.dir, 'tasks', `t-${first.taskId}`);
    assert.equal(received.env.SVC_TASK_ID, first.taskId);
    assert.equal(received.env.SVCT_TASK_ID, first.taskId);
    assert.equal(received.env.SVC_TASK_NAME, first.name);
    assert.equal(received.env.SVC_NCA_ID, 'nca-test');
    assert.equal(received.env.SVC_INSTANCE_ID, first.instanceId);
    assert.equal(received.env.SVC_RESULTS_DIR, path.join(workDir, 'results'));
    assert.equal(received.env.SVC_PROGRESS_FILE_PATH, path.join(workDir, 'output', 'progress'));
    assert.equal(received.env.MINE, 'yes');
    assert.equal(received.env.TOKEN, 's3cret-one');
    assert.equal(received.env.PORT, undefined, 'a task gets no port');
    assert.equal(received.env.INFERENCE_PORT, undefined);
    assert.deepEqual(received.secretsFile, { TOKEN: 's3cret-one', 'with.dot': { a: 1 } });
    assert.equal(received.secretsMode, 0o600);
    assert.deepEqual(JSON.parse(byName.get('secrets-after.json')!.body), { TOKEN: 's3cret-two' });

    // Dropped from the desired set: forgotten with its work dir.
    assert.ok(runner.reports().some((report) => report.taskId === first.taskId), 'an ended task is held until dropped');
    runner.applyDesired([], []);
    await eventually(() => (existsSync(workDir) ? undefined : true), 'work dir removed');
    assert.ok(!runner.reports().some((report) => report.taskId === first.taskId));
  });

  test('a refused upload makes the task ERRORED; a dropped running task is STOPPED and never uploads', async () => {
    const refusing = await uploadServer(413);
    const { log } = captureLog();
    const dir = await tempDir('task-runner-refused');
    const own = await startTaskRunner({
      runtime: createProcessRuntime({ catalogFile: CATALOG, stateDir: dir.dir, log }), stateDir: dir.dir, log,
      uploader: httpResultUploader({ server: refusing.url, credential: 'svcagent-test' }), retry: { initialMs: 50, maxMs: 200 },
    });
    const seen: TaskReport[] = [];
    own.onReport((report) => seen.push(report));
    try {
      const refused = spec('test/task-progress', { containerEnvironment: [{ key: 'TASK_STEPS', value: '1' }, { key: 'TASK_STEP_MS', value: '0' }] });
      const dropped = spec('test/task-progress', { containerEnvironment: [{ key: 'TASK_STEPS', value: '1000' }, { key: 'TASK_STEP_MS', value: '50' }] });
      own.applyDesired([refused.taskId, dropped.taskId], [refused, dropped]);
      const ended = await eventually(() => seen.find((report) => report.taskId === refused.taskId && report.state === 'ERRORED'), 'refused upload');
      assert.match(ended.message!, /^results upload failed: upload of result\.txt answered 413: too large$/);
      assert.equal(ended.exitCode, 0);
      await eventually(() => seen.find((report) => report.taskId === dropped.taskId && report.state === 'RUNNING'), 'running');
      own.applyDesired([refused.taskId], []);
      const stopped = await eventually(() => seen.find((report) => report.taskId === dropped.taskId && report.state === 'STOPPED'), 'stopped');
      assert.equal(stopped.message, 'no longer desired');
      assert.ok(!refusing.received.some((upload) => upload.url.includes(dropped.taskId)), 'nothing of the dropped task uploaded');
    } finally {
      await own.stop(0);
      await refusing.close();
      await dir.remove();
    }
  });
});
