// SlotLeases (invocation/leases.ts) on a real NATS KV bucket: two instances of it stand for two API
// replicas. The entry of a version holds one count record per replica, whatever the requests in flight;
// the replicas together never take more than an instance's maxRequestConcurrency; a slot handed from one
// replica to another is counted by the receiver before the giver lets it go.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import type { ReadyInstance } from '../src/control/instances/service.ts';
import { SlotLeases } from '../src/invocation/leases.ts';
import { forgetVersion, NATS_URL, natsAvailable } from './helpers/nats.ts';

const ready = await natsAvailable();

describe('slot leases shared by replicas', { skip: !ready }, () => {
  const versionId = randomUUID();
  after(() => forgetVersion(versionId));

  test('count records per replica, the instance limit across both, and a hand-over counted before it is let go', async () => {
    const nc = await connect({ servers: NATS_URL.replace(/^nats:\/\//, '') });
    const kv = await new Kvm(nc).create('svc_slots', { history: 1 });
    const [first, second] = [new SlotLeases(kv, 'replica-a'), new SlotLeases(kv, 'replica-b')];
    const instance: ReadyInstance = {
      instanceId: 'i1', versionId, clusterId: 'c1', maxRequestConcurrency: 3, gpu: 'L40', instanceType: 't', backend: 'b', region: 'r',
      endpoint: { host: '127.0.0.1', ports: { inference: 1, health: 1 } },
    };
    const instances = () => [instance];
    const inflight = async () => {
      const records = (await kv.get(versionId))!.json<Record<string, { inflight: Record<string, number> }>>();
      return Object.fromEntries(Object.entries(records).map(([replica, record]) => [replica, record.inflight.i1]));
    };
    try {
      const taken = await first.acquireMany(versionId, 2, instances, () => false);
      assert.equal(taken?.length, 2);
      const third = await second.tryAcquire(versionId, instances);
      assert.ok(third, 'the third slot, taken by the other replica');
      assert.equal(await second.tryAcquire(versionId, instances), undefined, 'no fourth: the instance is full across both');
      assert.deepEqual(await inflight(), { 'replica-a': 2, 'replica-b': 1 }, 'one record per replica, not one per lease');

      // The first hands one of its slots to the second, whose request it serves.
      await second.hold(taken![0]);
      assert.deepEqual(await inflight(), { 'replica-a': 2, 'replica-b': 2 }, 'counted by both for a moment, never by none');
      await first.handOver(taken![0]);
      assert.deepEqual(await inflight(), { 'replica-a': 1, 'replica-b': 2 });

      await Promise.all([first.release(taken![1]), second.release(taken![0]), second.release(third)]);
      assert.deepEqual(await inflight(), {}, 'a replica that runs nothing keeps no record');
      assert.ok(await second.tryAcquire(versionId, instances), 'the slots are free again');
    } finally {
      first.close();
      second.close();
      await nc.close();
    }
  });
});
