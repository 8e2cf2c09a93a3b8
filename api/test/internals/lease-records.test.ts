// lease-records.ts: a replica's Share written as its record, and GoneReplicas: a replica found gone counts
// only what its requests ran on, for GONE_GRACE_MS, then nothing; a record it writes after the verdict
// counts again; a suspect is asked at most every 500 ms.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GONE_GRACE_MS, GoneReplicas, LEASE_MS, runningIn, Share, type Records } from '../../src/invocation/lease-records.ts';

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
  waiting.waiting = true;
  assert.deepEqual(waiting.record(), { until: 1_000 + LEASE_MS, inflight: {}, waiting: true });
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
  assert.deepEqual(gone.suspects(Object.keys(records)), ['a']);
  assert.deepEqual(gone.suspects(Object.keys(records)), [], 'asked just now');
  t.mock.timers.tick(500);
  assert.deepEqual(gone.suspects(Object.keys(records)), ['a']);
});
