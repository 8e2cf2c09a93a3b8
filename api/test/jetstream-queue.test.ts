// JetStreamQueue (invocation/jetstream-queue.ts) on a real NATS JetStream: two queues in this process
// stand for two API replicas. Requests enqueued on both, in turn, are granted in the order they were
// enqueued, never more at once than the instance's maxRequestConcurrency, each on the replica that holds
// it; a full queue is a 429 on every replica; a client that leaves takes its ticket with it. The server
// wants credentials; what a client with them but without the installation's key says is not believed.
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
      const queue = await JetStreamQueue.connect({ nats: { ...nats.settings, natsPrefix }, signer, maxDepth, log, adopt: async () => undefined });
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

  test('FIFO across replicas, at most maxRequestConcurrency at once, each granted where it waits', async () => {
    const { pair, granted, request, instance } = await setup(100, 2);
    const ids = Array.from({ length: 12 }, (_, i) => `r${String(i).padStart(2, '0')}`);
    for (const [i, id] of ids.entries()) await pair[i % 2].enqueue(request(id, i % 2));
    pair[0].ready(instance.versionId, [instance]);
    let running = 0;
    let most = 0;
    for (let done = 0; done < ids.length; done++) {
      await until(`grant ${done + 1}`, async () => granted.length > done);
      running = granted.length - done;
      most = Math.max(most, running);
      // Hold the slot a moment so another replica could try to overtake, then hand it back.
      await new Promise((resolve) => setTimeout(resolve, 20));
      granted[done].grant.release('done');
    }
    assert.deepEqual(granted.map((entry) => entry.id), ids, 'granted in the order enqueued, whichever replica holds them');
    assert.deepEqual(granted.map((entry) => entry.replica), ids.map((_, i) => i % 2), 'each on the replica that holds its client');
    assert.ok(most <= 2, `at most 2 at once, saw ${most}`);
  });

  test('a full queue is a 429 on either replica; a request whose client left is never granted', async () => {
    const { pair, granted, request, instance } = await setup(3, 1);
    const leaving = request('leaves', 1);
    await pair[0].enqueue(request('a'));
    await pair[1].enqueue(leaving);
    await pair[0].enqueue(request('b'));
    for (const queue of pair) {
      await assert.rejects(queue.enqueue(request('extra')), (error: { status?: number }) => error.status === 429);
    }
    assert.equal(pair[1].remove(leaving), true);
    pair[1].ready(instance.versionId, [instance]);
    await until('the first grant', async () => granted.length === 1);
    granted[0].grant.release('done');
    await until('the second grant', async () => granted.length === 2);
    assert.deepEqual(granted.map((entry) => entry.id), ['a', 'b']);
  });

  test('with the head here, nothing waiting and room on an instance, a request runs without a ticket; a full instance means a ticket', async () => {
    const { pair, granted, request, instance, versionId } = await setup(10, 1, 1);
    pair[0].ready(instance.versionId, [instance]);
    await pair[0].enqueue(request('first'));
    await until('the first grant', async () => granted.length === 1);
    granted[0].grant.release('done');
    const before = await nats.ticketsTaken(versionId);
    await pair[0].enqueue(request('at once'));
    assert.equal(granted.at(-1)?.id, 'at once', 'granted before enqueue returned');
    assert.equal(await nats.ticketsTaken(versionId), before, 'no ticket was written');
    // The only slot is taken: the next request waits in the stream like any other.
    await pair[0].enqueue(request('waits'));
    assert.equal(await nats.ticketsTaken(versionId), before + 1, 'a ticket for the request that waits');
    assert.equal(granted.length, 2);
    granted[1].grant.release('done');
    await until('the waiting request granted', async () => granted.length === 3);
    assert.equal(granted[2].id, 'waits');
  });

  test('on a replica without the head too, with nothing waiting and room, a request runs without a ticket', async () => {
    const { pair, granted, request, instance, versionId } = await setup(10, 4);
    const learned = new Promise<void>((resolve) => pair[1].onInstances(() => resolve()));
    pair[0].ready(instance.versionId, [instance]);
    await pair[0].enqueue(request('first'));
    await until('the first grant', async () => granted.length === 1);
    await learned;
    const before = await nats.ticketsTaken(versionId);
    await pair[1].enqueue(request('direct', 1));
    assert.deepEqual(granted.map((entry) => [entry.id, entry.replica]), [['first', 0], ['direct', 1]], 'granted on its replica before enqueue returned');
    assert.equal(await nats.ticketsTaken(versionId), before, 'no ticket was written');
  });

  test('a replica that dies while running a request another replica granted: its slot comes back once it is found gone', async () => {
    const { pair, join, granted, request, instance } = await setup(10, 1, 1);
    pair[0].ready(instance.versionId, [instance]);
    // The first replica alone: it takes the head (it grants its own request).
    await pair[0].enqueue(request('first'));
    await until('the first grant', async () => granted.length === 1);
    granted[0].grant.release('done');
    const late = await join();
    await late.enqueue(request('on the second', 1));
    await until('the grant on the second replica', async () => granted.length === 2);
    assert.equal(granted[1].replica, 1, 'granted where its client waits, by the head on the first');
    // It dies holding the slot: no release; the next request finds no room, asks, and hears no responder.
    await late.close();
    await pair[0].enqueue(request('after'));
    await until('the slot to come back', async () => granted.length === 3, LEASE_MS + 10_000);
    assert.equal(granted[2].id, 'after');
  });

  test('the head\'s holder dies while another replica runs on a slot it lent: the borrower counts the slot before the lender\'s count lapses', async () => {
    const { pair, join, granted, request, instance, versionId } = await setup(10, 1, 1);
    pair[0].ready(instance.versionId, [instance]);
    await pair[0].enqueue(request('first'));
    await until('the first grant', async () => granted.length === 1);
    granted[0].grant.release('done');
    const borrower = await join();
    await borrower.enqueue(request('borrowed', 1));
    await until('the grant on the second replica', async () => granted.length === 2);
    await pair[0].close();
    const nc = await nats.connect();
    try {
      const slots = await new Kvm(nc).open('svc_slots');
      const counted = async () => (await slots.get(versionId))?.json<Record<string, { inflight: Record<string, number> }>>()[borrower.replicaId]?.inflight[instance.instanceId] === 1;
      await until('the borrower counts the lent slot as its own', counted);
    } finally {
      await nc.close();
    }
    // Well past the dead lender's grace: the one slot is still taken, so the next request waits for it.
    await borrower.enqueue(request('next', 1));
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    assert.deepEqual(granted.map((entry) => entry.id), ['first', 'borrowed'], 'maxRequestConcurrency 1 holds without the lender');
    granted[1].grant.release('done');
    await until('the next grant once the slot is free', async () => granted.length === 3);
    assert.equal(granted[2].id, 'next');
  });

  test('a client with the server\'s credentials but not the installation\'s key: its ready entries and grants are not believed', async () => {
    const { pair, granted, request, instance, versionId } = await setup(10, 1);
    const learned = new Map<string, ReadyInstance[]>();
    pair[1].onInstances((version, instances) => learned.set(version, instances));
    pair[0].ready(versionId, [instance]);
    await until('the second replica to learn the instance', async () => learned.get(versionId)?.length === 1);
    await pair[0].enqueue(request('holds the slot'));
    await pair[1].enqueue(request('waits', 1));
    assert.equal(granted.length, 1, 'the only slot is taken: the second request waits');

    const forger = await nats.connect();
    try {
      const forged = { ...instance, endpoint: { host: '127.0.0.1', ports: { inference: 9, health: 9 } } };
      const kv = await new Kvm(forger).open('svc_ready');
      const genuine = (await kv.get(versionId))!.string();
      const mac = genuine.slice(0, genuine.indexOf('.'));
      await kv.put(versionId, JSON.stringify([forged]));
      await kv.put(versionId, `${mac}.${JSON.stringify([forged])}`);
      const grant = { id: 'waits', lease: { id: 'forged', versionId, instance: forged } };
      const wrongKey = createReplicaSigner(randomBytes(32).toString('base64url')).sign(`grant ${pair[1].replicaId}`, grant);
      for (const attempt of [JSON.stringify(grant), wrongKey]) {
        assert.equal((await forger.request(`svc.replica.${pair[1].replicaId}.grant`, attempt)).string(), 'gone', 'a forged grant is refused');
      }
      // Another version announced after the forgeries: once the second replica has it, it has read them too.
      const after = { ...instance, versionId: randomUUID(), instanceId: randomUUID() };
      pair[0].ready(after.versionId, [after]);
      await until('the later announcement', async () => learned.has(after.versionId));
      assert.deepEqual(learned.get(versionId), [instance], 'the forged entries changed nothing');
    } finally {
      await forger.close();
    }
    granted[0].grant.release('done');
    await until('the waiting request granted', async () => granted.length === 2);
    assert.deepEqual([granted[1].id, granted[1].replica, granted[1].grant.instance], ['waits', 1, instance], 'granted on the genuine instance');
  });

  test('two installations on one server, each with its own prefix: neither sees the other\'s instances, tickets or buckets', async () => {
    const { pair, join, granted, request, instance, versionId } = await setup(10, 1, 1);
    const other = await join('staging');
    const seen: string[] = [];
    other.onInstances((version) => seen.push(version));
    const learned = new Promise<void>((resolve) => pair[0].onInstances(() => resolve()));
    pair[0].ready(versionId, [instance]);
    await learned;
    await pair[0].enqueue(request('ours'));
    await other.enqueue(request('theirs', 1));
    await until('ours granted', async () => granted.length === 1);
    granted[0].grant.release('done');
    // The same version id in the other installation has no instance: its request waits there, in its own stream.
    assert.equal(await nats.ticketsTaken(versionId, 'staging'), 1);
    assert.equal(await nats.ticketsTaken(versionId, 'svc'), 0, 'ours ran at once: no ticket in our stream');
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
