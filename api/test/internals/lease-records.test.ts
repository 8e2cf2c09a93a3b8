// lease-records.ts: a replica's Share written as its record, and GoneReplicas: a replica found gone counts
// only what its requests ran on, for GONE_GRACE_MS, then nothing; a record it writes after the verdict
// counts again; a suspect is asked at most every 500 ms.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fairShare, GONE_GRACE_MS, GoneReplicas, LEASE_MS, runningIn, Share, type Records } from '../../src/invocation/lease-records.ts';

test('a share is written as one record: spare slots counted in inflight too, none when it counts nothing', (t) => {
  t.mock.timers.enable({ apis: ['Date'], now: 1_000 });
  const share = new Share();
  assert.equal(share.record(), undefined);
  assert.equal(share.empty, true);
  share.running.set('i1', 2);
  share.spare.set('i1', 1);
  share.spare.set('i2', 1);
  assert.deepEqual(share.record(), { until: 1_000 + LEASE_MS, inflight: { i1: 3, i2: 1 }, spare: { i1: 1, i2: 1 } });
  const waiting = new Share();
  waiting.waiting = 3;
  assert.deepEqual(waiting.record(), { until: 1_000 + LEASE_MS, inflight: {}, waiting: true, wants: 3 });
});

test('the requests running across replicas leave spare slots out (what a graceful undeploy waits for)', () => {
  const records: Records = {
    a: { until: 9e15, inflight: { i1: 3, i2: 1 }, spare: { i1: 1, i2: 1 } },
    b: { until: 9e15, inflight: { i1: 2 } },
    idle: { until: 9e15, inflight: {}, waiting: true },
  };
  assert.equal(runningIn(records), 4);
  assert.equal(runningIn({}), 0);
});

test('a replica found gone: its running slots count for the grace, its spare ones and its wait not at all; expired records never', (t) => {
  t.mock.timers.enable({ apis: ['Date'], now: 100_000 });
  const gone = new GoneReplicas('me');
  const records: Records = {
    me: { until: 100_000 + LEASE_MS, inflight: { i1: 1 } },
    dead: { until: 100_000 + LEASE_MS - 1_000, inflight: { i1: 3, i2: 1 }, spare: { i1: 1, i2: 1 }, waiting: true },
    expired: { until: 99_999, inflight: { i1: 1 } },
  };
  assert.deepEqual(Object.keys(gone.live(records)).sort(), ['dead', 'me'], 'an expired record does not count');
  assert.equal(gone.found('me'), false, 'this replica is never gone');
  assert.equal(gone.found('dead'), true);
  assert.equal(gone.found('dead'), false, 'known already');
  assert.deepEqual(gone.live(records).dead, { until: records.dead.until, inflight: { i1: 2 } }, 'only what its requests ran on');
  t.mock.timers.tick(GONE_GRACE_MS + 1);
  assert.equal(gone.live(records).dead, undefined, 'after the grace: nothing');
  // It was cut off, not dead: a record written after the verdict counts whole again.
  const rewritten = { ...records, dead: { until: Date.now() + LEASE_MS, inflight: { i1: 1 } } };
  assert.deepEqual(gone.live(rewritten).dead, rewritten.dead);
  assert.equal(gone.found('dead'), true, 'it may be found gone again');
});

test('suspects are the other replicas not known gone, each asked at most every 500 ms', (t) => {
  t.mock.timers.enable({ apis: ['Date'], now: 1_000 });
  const gone = new GoneReplicas('me');
  const records: Records = { me: { until: 9e15, inflight: {} }, a: { until: 9e15, inflight: {} }, b: { until: 9e15, inflight: {} } };
  gone.found('b');
  assert.deepEqual(gone.suspects(records), ['a']);
  assert.deepEqual(gone.suspects(records), [], 'asked just now');
  t.mock.timers.tick(500);
  assert.deepEqual(gone.suspects(records), ['a']);
});

test('fair shares: unbounded while the replicas want no more than there are slots, else in proportion, adding up to the slots', () => {
  const record = (running: number, wants: number, spare = 0) => ({
    until: 9e15, inflight: { i1: running + spare }, ...(spare ? { spare: { i1: spare } } : {}), ...(wants ? { waiting: true, wants } : {}),
  });
  assert.equal(fairShare({ a: record(2, 0), b: record(1, 1) }, 'a', 4), Infinity, 'four wanted of four');
  const busy: Records = { a: record(4, 12), b: record(0, 16) };
  assert.deepEqual([fairShare(busy, 'a', 4), fairShare(busy, 'b', 4)], [2, 2], 'sixteen wanted at each: half each');
  const lopsided: Records = { a: record(3, 27, 2), b: record(1, 9) };
  assert.deepEqual([fairShare(lopsided, 'a', 8), fairShare(lopsided, 'b', 8)], [6, 2], 'spare slots are no demand: 30 against 10');
  assert.equal(fairShare(busy, 'c', 4), 0, 'a replica with no record has no share');
  // A replica of the release before says only that requests wait there: one.
  assert.deepEqual([fairShare({ a: record(4, 7), old: { until: 9e15, inflight: {}, waiting: true } }, 'old', 4)], [0]);
});

test('fair shares: the slot left over by equal parts takes turns, the same on every replica', () => {
  const three: Records = Object.fromEntries(['a', 'b', 'c'].map((name) => [name, { until: 9e15, inflight: { i1: 1 }, waiting: true, wants: 9 }]));
  const owners = new Set<string>();
  for (let now = 0; now < 40_000; now += 2_000) {
    const shares = ['a', 'b', 'c'].map((name) => fairShare(three, name, 4, now));
    assert.equal(shares.reduce((sum, share) => sum + share, 0), 4, 'the shares add up to the slots');
    owners.add(['a', 'b', 'c'][shares.indexOf(2)]);
  }
  assert.equal(owners.size, 3, 'each replica gets the fourth slot in its turn');
});
