// SlotLeases (invocation/leases.ts) on a real NATS KV bucket: two instances of it stand for two API
// replicas. The entry of a version holds one count record per replica, whatever the requests in flight;
// the replicas together never take more than an instance's maxRequestConcurrency. A replica keeps spare slots,
// taken and given back without a write, and gives them up when another replica waits for one or when it
// leaves them unused; while the replicas want more slots than there are, each takes its fair share. A
// replica found gone counts no more (what it ran, a moment more).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Kvm } from '@nats-io/kv';
import type { ReadyInstance } from '../src/control/instances/service.ts';
import { LEASE_MS } from '../src/invocation/lease-records.ts';
import { SlotLeases } from '../src/invocation/leases.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { until } from './helpers/wait.ts';

describe('slot leases shared by replicas', { skip: !natsServerAvailable() }, () => {
  let nats: TestNats;
  before(async () => {
    nats = await startNats();
  });
  after(async () => {
    await nats?.stop();
  });

  /** `gone`: the replicas that no longer answer (the queue asks NATS; here the test says). */
  async function setup(maxRequestConcurrency = 3, gone = new Set<string>()) {
    const versionId = randomUUID();
    const nc = await nats.connect();
    const kv = await new Kvm(nc).create('svc_slots', { history: 1 });
    const isGone = async (replica: string) => gone.has(replica);
    const replicas = [new SlotLeases(kv, 'replica-a', isGone), new SlotLeases(kv, 'replica-b', isGone)];
    const instance: ReadyInstance = {
      instanceId: 'i1', versionId, clusterId: 'c1', maxRequestConcurrency, gpu: 'L40', instanceType: 't', backend: 'b', region: 'r',
      endpoint: { host: '127.0.0.1', ports: { inference: 1, health: 1 } },
    };
    /** Each replica's count on the instance, and the entry's revision (a write changes it). */
    const entry = async () => {
      const found = await kv.get(versionId);
      const records = found?.operation === 'PUT' ? found.json<Record<string, { inflight: Record<string, number> }>>() : {};
      return { counts: Object.fromEntries(Object.entries(records).map(([replica, record]) => [replica, record.inflight.i1])), revision: found?.revision };
    };
    // The bucket's watch tells both replicas of every change, as the queue's does.
    const watch = await kv.watch({ key: versionId });
    void (async () => {
      for await (const change of watch) for (const replica of replicas) replica.changed(versionId, change);
    })();
    const close = async () => {
      watch.stop();
      for (const replica of replicas) replica.close();
      await nc.close();
    };
    return { versionId, replicas, instances: () => [instance], entry, close };
  }

  test('a slot given back while an acquirer\'s look is being written is taken by it at once, not at its next recheck', { timeout: 20_000 }, async () => {
    const { versionId, instances, close } = await setup(1);
    const nc = await nats.connect();
    // Its recheck an hour away: only a wake-up it does not miss gets it the slot within the test's time.
    const leases = new SlotLeases(await new Kvm(nc).open('svc_slots'), 'replica-c', async () => false, 3_600_000);
    try {
      const held = (await leases.acquire(versionId, instances, () => false))!;
      leases.wait(versionId, 1); // a write of this replica's record, in flight
      const acquiring = leases.acquire(versionId, instances, () => false); // its look waits behind that write
      void leases.release(held); // given back meanwhile: a spare slot, and a wake-up with no one waiting yet
      const taken = await acquiring;
      assert.equal(taken?.instance.instanceId, 'i1');
    } finally {
      leases.close();
      await nc.close();
      await close();
    }
  });

  test('count records per replica, the instance limit across both, and a slot let go while the other waits written back at once', async () => {
    const { versionId, replicas: [first, second], instances, entry, close } = await setup();
    const inflight = async () => (await entry()).counts;
    try {
      const taken = await first.acquireMany(versionId, 2, instances, () => false);
      assert.equal(taken?.length, 2);
      const third = await second.tryAcquire(versionId, instances);
      assert.ok(third, 'the third slot, taken by the other replica');
      assert.equal(await second.tryAcquire(versionId, instances), undefined, 'no fourth: the instance is full across both');
      assert.deepEqual(await inflight(), { 'replica-a': 2, 'replica-b': 1 }, 'one record per replica, not one per lease');

      // With the second's requests waiting, a slot the first lets go is written back, not kept spare.
      second.wait(versionId, 1);
      await until('the first sees the second wait', async () => first.waitingElsewhere(versionId) === 1);
      await first.release(taken![0]);
      assert.deepEqual(await inflight(), { 'replica-a': 1, 'replica-b': 1 });
      assert.ok(await second.tryAcquire(versionId, instances), 'the waiting replica takes it');
      assert.deepEqual(await inflight(), { 'replica-a': 1, 'replica-b': 2 });
    } finally {
      await close();
    }
  });

  test('spare slots: half the room left at most, taken and given back without a write, given up when another replica has requests waiting', async () => {
    const { versionId, replicas: [first, other], instances, entry, close } = await setup();
    try {
      const lease = await first.tryAcquire(versionId, instances);
      assert.ok(lease);
      assert.deepEqual((await entry()).counts, { 'replica-a': 2 }, 'the slot taken and one of the two left kept spare');
      assert.ok(await other.tryAcquire(versionId, instances), 'the other half of the room for the other replica');
      assert.equal(await other.tryAcquire(versionId, instances), undefined, 'spare slots count: no more room');

      const counted = await entry();
      await first.release(lease);
      const again = await first.tryAcquire(versionId, instances);
      assert.ok(again, 'a spare slot');
      assert.equal((await entry()).revision, counted.revision, 'neither the release nor the take wrote');

      // Requests wait on the other replica: its record says so, and the first gives up its spare slot.
      other.wait(versionId, 1);
      assert.ok(await other.acquire(versionId, instances, () => false), 'the waiting replica gets a slot');
      assert.deepEqual((await entry()).counts, { 'replica-a': 1, 'replica-b': 2 }, 'the first counts only the slot it runs on');
      other.wait(versionId, 0);
    } finally {
      await close();
    }
  });

  test('while the replicas want more slots than there are, each takes only its fair share, even with room', async () => {
    const { versionId, replicas: [first, other], instances, entry, close } = await setup(10);
    try {
      const lease = await first.tryAcquire(versionId, instances);
      assert.deepEqual((await entry()).counts, { 'replica-a': 5 }, 'one slot and four spare: half the room left');
      other.wait(versionId, 20);
      await until('the spare slots given up', async () => (await entry()).counts['replica-a'] === 1);
      // 2 wanted here (one running, one more), 20 there, 10 slots: 1 and 9.
      assert.equal(await first.tryAcquire(versionId, instances), undefined, 'nine free, none taken beyond this replica\'s share');
      assert.equal((await other.acquireMany(versionId, 20, instances, () => false))?.length, 9, 'the waiting replica takes its nine');
      assert.equal(first.keeps(versionId, instances()), false, 'with nothing waiting here, its share is none');
      first.wait(versionId, 1);
      await until('a slot done here may serve the next request waiting here: one is its share', async () => first.keeps(versionId, instances()));
      other.wait(versionId, 0);
      await first.release(lease!);
    } finally {
      await close();
    }
  });

  test('spare slots left unused for a renewal period go back', async () => {
    const { versionId, replicas: [granting], instances, entry, close } = await setup();
    try {
      await granting.release((await granting.tryAcquire(versionId, instances))!);
      assert.deepEqual((await entry()).counts, { 'replica-a': 2 });
      await until('unused spare slots given back', async () => (await entry()).counts['replica-a'] === undefined, LEASE_MS);
    } finally {
      await close();
    }
  });

  test('a replica found gone: its wait counts no more at once, the slots it ran requests on once an instance had a moment to finish them', async () => {
    const gone = new Set<string>();
    const { versionId, replicas: [survivor, dying], instances, entry, close } = await setup(2, gone);
    try {
      assert.equal((await dying.acquireMany(versionId, 2, instances, () => false))?.length, 2);
      dying.wait(versionId, 1);
      await until('the wait written', async () => {
        const found = await entry();
        return found.counts['replica-b'] === 2 && (await survivor.tryAcquire(versionId, instances)) === undefined;
      });
      // It dies holding both slots and waiting: nothing more is written from it.
      gone.add('replica-b');
      const lease = await survivor.acquire(versionId, instances, () => false);
      assert.ok(lease, 'a slot once the dying replica is found gone (not when its record expires)');
      assert.deepEqual((await entry()).counts, { 'replica-a': 1 }, 'its record dropped by the next write');
    } finally {
      await close();
    }
  });
});
