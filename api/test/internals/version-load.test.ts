// VersionLoad (invocation/version-load.ts): running requests and latest request per version for the load
// metrics, and placement's demand, told at once when a version gains or loses all its work, else at most
// every 250 ms.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { VersionLoad } from '../../src/invocation/version-load.ts';

const target = { ncaId: 'acct', functionId: 'f', versionId: 'v1', functionName: 'fn', inferenceUrl: '/echo' };

function setup() {
  const depths = new Map<string, number>();
  const told: [string, number][] = [];
  let now = 1_000;
  const load = new VersionLoad({
    depth: (versionId) => depths.get(versionId) ?? 0, demand: { setDemand: (versionId, count) => told.push([versionId, count]) }, clock: () => now,
  });
  return { load, depths, told, at: (ms: number) => (now = ms) };
}

test('the load of every version invoked: waiting, running, and when the latest request came', () => {
  const { load, depths, at } = setup();
  load.requested(target);
  at(2_000);
  load.requested(target);
  load.recovered({ ...target, versionId: 'v2' });
  load.recovered(target);
  depths.set('v1', 3);
  load.started('v1');
  load.started('v1');
  load.ended('v1');
  assert.deepEqual([...load.load()], [
    { ncaId: 'acct', functionId: 'f', versionId: 'v1', queued: 3, inflight: 1, lastRequestAt: 2_000 },
    { ncaId: 'acct', functionId: 'f', versionId: 'v2', queued: 0, inflight: 0, lastRequestAt: undefined },
  ]);
});

const microtask = () => new Promise<void>((resolve) => queueMicrotask(resolve));

test('demand is told at once when a version gains or loses all its work, else at most every 250 ms', async (t) => {
  t.mock.timers.enable({ apis: ['Date'], now: 10_000 });
  const { load, depths, told } = setup();
  load.report('v1');
  await microtask();
  assert.deepEqual(told, [['v1', 0]], 'the first report');
  depths.set('v1', 2);
  load.report('v1');
  await microtask();
  load.started('v1');
  load.report('v1');
  await microtask();
  assert.deepEqual(told, [['v1', 0], ['v1', 2]], 'gained work: told at once; more work within 250 ms: not yet');
  t.mock.timers.tick(250);
  load.report('v1');
  await microtask();
  assert.deepEqual(told.at(-1), ['v1', 3], '250 ms later the count is told');
  depths.set('v1', 0);
  load.ended('v1');
  load.report('v1');
  await microtask();
  assert.deepEqual(told.at(-1), ['v1', 0], 'lost all its work: told at once');
  assert.equal(told.length, 4);
});

test('a slot handed on in the same turn counts: the request that ended and the one granted its slot read as work, not as none', async () => {
  const { load, depths, told } = setup();
  depths.set('v1', 1);
  load.started('v1');
  load.report('v1');
  await microtask();
  // The running request ends and its slot goes to the waiting one (as service.ts #finished: release, then
  // report), whose runner counts it a microtask later.
  load.ended('v1');
  depths.set('v1', 0);
  queueMicrotask(() => load.started('v1'));
  load.report('v1');
  await microtask();
  await microtask();
  assert.deepEqual(told, [['v1', 2]], 'never told 0 while a request was handed its slot');
});
