// JetStreamQueue (invocation/jetstream-queue.ts) on a real NATS JetStream: two queues in this process
// stand for two API replicas. Requests enqueued on both are granted in order on each, never more at once
// than the instance's maxRequestConcurrency, each on the replica that holds it, both replicas served while
// both wait; a slot serves the next request on its replica with no write; a full queue is a 429 on every
// replica; a client that leaves takes its request with it. The server wants credentials; what a client
// with them but without the installation's key says is not believed.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, test } from 'node:test';
import { Kvm } from '@nats-io/kv';
import type { ReadyInstance } from '../src/control/instances/service.ts';
import { Invocation } from '../src/invocation/invocation.ts';
import { JetStreamQueue } from '../src/invocation/jetstream-queue.ts';
import { LEASE_MS } from '../src/invocation/lease-records.ts';
import type { Grant } from '../src/invocation/slots.ts';
import { createReplicaSigner } from '../src/invocation/replica-signing.ts';
import { createLogger } from '../src/logger.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { until } from './helpers/wait.ts';

describe('JetStreamQueue across two replicas', { skip: !natsServerAvailable() }, () => {
  let nats: TestNats;
  const signer = createReplicaSigner(randomBytes(32).toString('base64url'));
  const queues: JetStreamQueue[] = [];
  before(async () => {
    nats = await startNats();
  });
  // Each test's replicas are the only ones: a queue left running would compete for the next test's head.
  afterEach(async () => {
    await Promise.all(queues.splice(0).map((queue) => queue.close()));
  });
  after(async () => {
    await nats?.stop();
  });

  /** `replicas` queues on one new version; `join` connects one more later (with another prefix, say). */
  async function setup(maxDepth: number, maxRequestConcurrency: number, replicas = 2) {
    const versionId = randomUUID();
    const log = createLogger('silent');
    const granted: { id: string; replica: number; grant: Grant }[] = [];
    const pair: JetStreamQueue[] = [];
    const join = async (natsPrefix = 'svc') => {
      const queue = await JetStreamQueue.connect({ nats: { ...nats.settings, natsPrefix }, signer, maxDepth, log });
      pair.push(queue);
      queues.push(queue);
      return queue;
    };
    for (let i = 0; i < replicas; i++) await join();
    const target = { ncaId: 'acct', functionId: 'f', versionId, functionName: 'fn', inferenceUrl: '/' };
    /**
     * A request whose client waits on replica `replica` (where it is enqueued): its grant is recorded. Only
     * that replica holds the object, so a grant recorded is one that reached the replica holding the client.
     */
    const request = (id: string, replica = 0) => {
      const invocation = new Invocation(id, target, 'owner', { headers: {}, body: Buffer.alloc(0), sse: false });
      void invocation.granted().then((grant) => granted.push({ id, replica, grant }));
      return invocation;
    };
    const instance: ReadyInstance = {
      instanceId: randomUUID(), versionId, clusterId: 'c1', maxRequestConcurrency, gpu: 'L40', instanceType: 't', backend: 'b', region: 'r',
      endpoint: { host: '127.0.0.1', ports: { inference: 1, health: 1 } },
    };
    return { pair, join, granted, request, instance, versionId };
  }

  test('in order on each replica, at most maxRequestConcurrency at once across both, each granted where it waits, both served while both wait', async () => {
    const { pair, granted, request, instance } = await setup(100, 2);
    const ids = Array.from({ length: 12 }, (_, i) => `r${String(i).padStart(2, '0')}`);
    for (const [i, id] of ids.entries()) pair[i % 2].enqueue(request(id, i % 2));
    pair[0].ready(instance.versionId, [instance]);
    let most = 0;
    for (let done = 0; done < ids.length; done++) {
      await until(`grant ${done + 1}`, async () => granted.length > done);
      most = Math.max(most, granted.length - done);
      // Hold the slot a moment so another replica could try to overtake, then hand it back.
      await new Promise((resolve) => setTimeout(resolve, 20));
      granted[done].grant.release('done');
    }
    for (const replica of [0, 1]) {
      assert.deepEqual(granted.filter((entry) => entry.replica === replica).map((entry) => entry.id), ids.filter((_, i) => i % 2 === replica), `in order on replica ${replica}`);
    }
    assert.deepEqual(granted.map((entry) => entry.replica), granted.map((entry) => ids.indexOf(entry.id) % 2), 'each on the replica that holds its client');
    assert.ok(most <= 2, `at most 2 at once, saw ${most}`);
    const firstHalf = granted.slice(0, 6).map((entry) => entry.replica);
    assert.ok(firstHalf.filter((replica) => replica === 1).length >= 2 && firstHalf.filter((replica) => replica === 0).length >= 2, `both replicas served early: ${firstHalf}`);
  });

  test('a full queue is a 429 on either replica once it counts the other\'s requests; a request whose client left is never granted', async () => {
    const { pair, granted, request, instance, versionId } = await setup(3, 1);
    const leaving = request('leaves', 1);
    pair[0].enqueue(request('a'));
    pair[1].enqueue(leaving);
    pair[0].enqueue(request('b'));
    await until('each replica counts the requests waiting on both', async () => pair.every((queue) => queue.depth(versionId) === 3));
    for (const queue of pair) assert.throws(() => queue.enqueue(request('extra')), (error: { status?: number }) => error.status === 429);
    assert.equal(pair[1].remove(leaving), true);
    pair[1].ready(instance.versionId, [instance]);
    await until('the first grant', async () => granted.length === 1);
    granted[0].grant.release('done');
    await until('the second grant', async () => granted.length === 2);
    assert.deepEqual(granted.map((entry) => entry.id), ['a', 'b']);
  });

  test('below capacity a request takes a spare slot and gives it back with no write; at capacity a slot serves the next request on its replica with none', async () => {
    const { pair, granted, request, instance, versionId } = await setup(100, 2);
    const nc = await nats.connect();
    try {
      const slots = await new Kvm(nc).open('svc_slots');
      const revision = async () => (await slots.get(versionId))?.revision ?? 0;
      const learned = new Promise<void>((resolve) => pair[1].onInstances(() => resolve()));
      pair[0].ready(versionId, [instance]);
      await learned;
      pair[0].enqueue(request('first'));
      await until('the first grant', async () => granted.length === 1);
      granted[0].grant.release('done');
      const quiet = await revision();
      pair[0].enqueue(request('spare'));
      await until('the spare slot taken', async () => granted.length === 2);
      granted[1].grant.release('done');
      assert.equal(await revision(), quiet, 'no write below capacity');

      // At capacity, ten requests waiting on each replica: once both wait, each runs on its share, one slot.
      for (let i = 0; i < 10; i++) for (const replica of [0, 1]) pair[replica].enqueue(request(`${replica}.${i}`, replica));
      await until('both slots taken', async () => granted.length === 4);
      const running = granted.slice(2);
      const handOver = async () => {
        const done = running.shift()!;
        const count = granted.length;
        done.grant.release('done');
        await until('the next grant', async () => granted.length === count + 1);
        running.push(granted.at(-1)!);
        return done.replica;
      };
      for (let settling = 0; new Set(running.map((entry) => entry.replica)).size < 2; settling++) {
        assert.ok(settling < 4, 'the replicas share the slots once both have requests waiting');
        await handOver();
      }
      const before = await revision();
      for (let handed = 1; handed <= 6; handed++) {
        const replica = await handOver();
        assert.equal(granted.at(-1)!.replica, replica, 'the slot served the next request on the same replica');
      }
      const writes = await revision() - before;
      assert.ok(writes <= 2, `six hand-overs, ${writes} writes (the count of waiting requests now and then)`);
    } finally {
      await nc.close();
    }
  });

  test('a replica that started after a version was announced tells the sets it knows to whoever asks later (the dispatcher\'s connection pools)', async () => {
    const { pair, join, granted, request, instance, versionId } = await setup(10, 1, 1);
    pair[0].ready(versionId, [instance]);
    const late = await join();
    late.enqueue(request('on the late replica', 1));
    await until('the late replica knows the instance (its request ran)', async () => granted.length === 1);
    const told: [string, ReadyInstance[]][] = [];
    late.onInstances((version, instances) => told.push([version, instances]));
    // Earlier tests' versions are announced on the same server too.
    assert.deepEqual(told.filter(([version]) => version === versionId), [[versionId, [instance]]], 'told at once, not only at the next change');
  });

  test('a replica that dies while running a request: its slot comes back once it is found gone', async () => {
    const { pair, join, granted, request, instance } = await setup(10, 1, 1);
    pair[0].ready(instance.versionId, [instance]);
    pair[0].enqueue(request('first'));
    await until('the first grant', async () => granted.length === 1);
    granted[0].grant.release('done');
    const late = await join();
    late.enqueue(request('on the second', 1));
    await until('the grant on the second replica', async () => granted.length === 2);
    assert.equal(granted[1].replica, 1, 'granted where its client waits');
    // It dies holding the slot: no release; the next request finds no room, asks, and hears no responder.
    await late.close();
    await pair[0].enqueue(request('after'));
    await until('the slot to come back', async () => granted.length === 3, LEASE_MS + 10_000);
    assert.equal(granted[2].id, 'after');
  });

  test('a client with the server\'s credentials but not the installation\'s key: its ready entries are not believed', async () => {
    const { pair, granted, request, instance, versionId } = await setup(10, 1);
    const learned = new Map<string, ReadyInstance[]>();
    pair[1].onInstances((version, instances) => learned.set(version, instances));
    pair[0].ready(versionId, [instance]);
    await until('the second replica to learn the instance', async () => learned.get(versionId)?.length === 1);
    pair[0].enqueue(request('holds the slot'));
    await until('the first grant', async () => granted.length === 1);
    pair[1].enqueue(request('waits', 1));

    const forger = await nats.connect();
    try {
      const forged = { ...instance, endpoint: { host: '127.0.0.1', ports: { inference: 9, health: 9 } } };
      const kv = await new Kvm(forger).open('svc_ready');
      const genuine = (await kv.get(versionId))!.string();
      const mac = genuine.slice(0, genuine.indexOf('.'));
      await kv.put(versionId, JSON.stringify([forged]));
      await kv.put(versionId, `${mac}.${JSON.stringify([forged])}`);
      const wrongKey = createReplicaSigner(randomBytes(32).toString('base64url')).sign(`ready ${versionId}`, [forged]);
      await kv.put(versionId, wrongKey);
      // Another version announced after the forgeries: once the second replica has it, it has read them too.
      const after = { ...instance, versionId: randomUUID(), instanceId: randomUUID() };
      pair[0].ready(after.versionId, [after]);
      await until('the later announcement', async () => learned.has(after.versionId));
      assert.deepEqual(learned.get(versionId), [instance], 'the forged entries changed nothing');
      assert.equal(granted.length, 1, 'the only slot is taken: the second request waits');
    } finally {
      await forger.close();
    }
    granted[0].grant.release('done');
    await until('the waiting request granted', async () => granted.length === 2);
    assert.deepEqual([granted[1].id, granted[1].replica, granted[1].grant.instance], ['waits', 1, instance], 'granted on the genuine instance');
  });

  test('two installations on one server, each with its own prefix: neither sees the other\'s instances, requests or buckets', async () => {
    const { pair, join, granted, request, instance, versionId } = await setup(10, 1, 1);
    const other = await join('staging');
    const seen: string[] = [];
    other.onInstances((version) => seen.push(version));
    const learned = new Promise<void>((resolve) => pair[0].onInstances(() => resolve()));
    pair[0].ready(versionId, [instance]);
    await learned;
    pair[0].enqueue(request('ours'));
    other.enqueue(request('theirs', 1));
    await until('ours granted', async () => granted.length === 1);
    granted[0].grant.release('done');
    // The same version id in the other installation has no instance: its request waits there.
    assert.equal(other.depth(versionId), 1);
    assert.equal(pair[0].depth(versionId), 0, 'not counted in ours');
    const client = await nats.connect();
    try {
      const kvm = new Kvm(client);
      assert.ok(await (await kvm.open('svc_ready')).get(versionId), 'our ready entry');
      assert.equal(await (await kvm.open('staging_ready')).get(versionId), null, 'none in theirs');
    } finally {
      await client.close();
    }
    assert.deepEqual(seen, []);
    assert.deepEqual(granted.map((entry) => entry.id), ['ours']);
    assert.equal(await other.position(request('theirs')), 1, 'first in its own line');
  });
});
