// The progress watcher on a real directory: one report per change of a progress file, half-written files
// skipped until complete, request directories older than the age limit removed.
import assert from 'node:assert/strict';
import { mkdir, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { watchProgress } from '../../src/compute/progress.ts';
import type { ProgressReport } from '../../src/compute/protocol.ts';
import { captureLog, eventually, tempDir } from './helpers.ts';

describe('progress watcher', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  before(async () => { dir = await tempDir('progress'); });
  after(() => dir.remove());

  test('reports each change once; a half-written file waits for its end', async () => {
    const outputDir = path.join(dir.dir, 'requests');
    await mkdir(path.join(outputDir, 'req-a'), { recursive: true });
    const file = path.join(outputDir, 'req-a', 'progress');
    await writeFile(file, '{"id":"req-a","progress":10,"partialResponse":{"tok');
    const reports: ProgressReport[] = [];
    const watch = watchProgress({ instanceId: 'inst-1', outputDir, log: captureLog().log, intervalMs: 20, emit: (p) => reports.push(p) });
    after(() => watch.stop());

    const ticks = async (n: number) => { for (let i = 0; i < n; i++) await new Promise((resolve) => setTimeout(resolve, 20)); };
    await ticks(5);
    assert.equal(reports.length, 0, 'nothing from a half-written file');
    await writeFile(file, '{"id":"req-a","progress":10,"partialResponse":{"tokens":["a"]}}');
    await eventually(() => reports[0], 'the first report');
    await writeFile(file, '{"id":"req-a","progress":10,"partialResponse":{"tokens":["a"]}}'); // same content again
    await mkdir(path.join(outputDir, 'req-b'));
    await writeFile(path.join(outputDir, 'req-b', 'progress'), '{"id":"req-b","progress":5}');
    await eventually(() => reports.find((r) => r.requestId === 'req-b'), 'the other request');
    await writeFile(file, '{"id":"req-a","progress":60}');
    await eventually(() => reports.find((r) => r.percent === 60), 'the change');
    await ticks(5);
    assert.deepEqual(reports, [
      { requestId: 'req-a', instanceId: 'inst-1', percent: 10, partialResponse: { tokens: ['a'] } },
      { requestId: 'req-b', instanceId: 'inst-1', percent: 5 },
      { requestId: 'req-a', instanceId: 'inst-1', percent: 60 },
    ]);
  });

  test('request directories untouched for longer than the age limit are removed', async () => {
    const outputDir = path.join(dir.dir, 'aged');
    const old = path.join(outputDir, 'req-old');
    const fresh = path.join(outputDir, 'req-fresh');
    await mkdir(old, { recursive: true });
    await mkdir(fresh);
    await writeFile(path.join(old, 'progress'), '{"progress":100}');
    const twoHoursAgo = new Date(Date.now() - 2 * 3_600_000);
    await utimes(path.join(old, 'progress'), twoHoursAgo, twoHoursAgo);
    await utimes(old, twoHoursAgo, twoHoursAgo);
    const reports: ProgressReport[] = [];
    const watch = watchProgress({ instanceId: 'inst-2', outputDir, log: captureLog().log, intervalMs: 20, emit: (p) => reports.push(p) });
    after(() => watch.stop());
    await eventually(() => stat(old).then(() => undefined, () => true), 'the old directory to go');
    assert.ok((await stat(fresh)).isDirectory(), 'a recent one stays');
    assert.equal(reports.length, 0, 'no report from a directory swept as stale');
  });
});
