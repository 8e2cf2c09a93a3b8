// JetStreamQueue (invocation/jetstream-queue.ts) over a version's life, on a real NATS JetStream with a
// server of the test's own: replicas that idle say nothing to the server (watches, not polls; an unchanged
// ready set is never written again), a version placement no longer knows leaves no stream or key behind,
// and a head holder cut off is taken over by the replica whose tickets wait, which then gets them in order.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { ReadyInstance } from '../src/control/instances/service.ts';
import { Invocation } from '../src/invocation/invocation.ts';
import { JetStreamQueue } from '../src/invocation/jetstream-queue.ts';
import type { Grant } from '../src/invocation/slots.ts';
import { createReplicaSigner } from '../src/invocation/replica-signing.ts';
import { createLogger } from '../src/logger.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { until } from './helpers/wait.ts';

describe('JetStreamQueue over a version\'s life', { skip: !natsServerAvailable() }, () => {
  let nats: TestNats;
  const signer = createReplicaSigner(randomBytes(32).toString('base64url'));
  const queues: JetStreamQueue[] = [];
  before(async () => {
    nats = await startNats();
  });
  afterEach(async () => {
    await Promise.all(queues.splice(0).map((queue) => queue.close()));
  });
  after(async () => {
    await nats?.stop();
  });

  async function replicas(count: number) {
    const granted: { id: string; replica: number; grant: Grant }[] = [];
    const pair: JetStreamQueue[] = [];
    for (let replica = 0; replica < count; replica++) {
      const queue = await JetStreamQueue.connect({ nats: nats.settings, signer, maxDepth: 100, log: createLogger('silent'), adopt: async () => undefined });
      pair.push(queue);
      queues.push(queue);
    }
    /** Queues a request on replica `replica` (where its client waits) and records its grant. */
    const enqueue = (replica: number, invocation: Invocation) => {
      void invocation.granted().then((grant) => granted.push({ id: invocation.id, replica, grant }));
      return pair[replica].enqueue(invocation);
    };
    return { pair, granted, enqueue };
  }

  function version(maxRequestConcurrency: number) {
    const versionId = randomUUID();
    const target = { ncaId: 'acct', functionId: 'f', versionId, functionName: 'fn', inferenceUrl: '/' };
    const request = (id: string) => new Invocation(id, target, 'owner', { headers: {}, body: Buffer.alloc(0), sse: false });
    // In placement's order of fields (control/instances/ready.ts), not the order the watch decodes them in.
    const instance = (): ReadyInstance => ({
      instanceId: `i-${versionId}`, versionId, clusterId: 'c1', endpoint: { host: '127.0.0.1', ports: { inference: 1, health: 1 } },
      maxRequestConcurrency, gpu: 'L40', instanceType: 't', backend: 'b', region: 'r',
    });
    return { versionId, request, instance };
  }

  /** Who holds the version's head, as its entry says. */
  async function holder(versionId: string): Promise<string | undefined> {
    const client = await nats.connect();
    try {
      return (await (await new Kvm(client).open('svc_heads')).get(versionId))?.string();
    } finally {
      await client.close();
    }
  }

  test('idle replicas send nothing: no polls, and a ready set announced again unchanged is not written', async (t) => {
    const { pair } = await replicas(2);
    const versions = [version(2), version(2), version(2)];
    const learned = new Set<string>();
    pair[1].onInstances((versionId) => learned.add(versionId));
    for (const { versionId, instance } of versions) pair[0].ready(versionId, [instance()]);
    await until('the second replica to learn every version', async () => learned.size === versions.length);
    await until('a head for every version', async () => (await Promise.all(versions.map(({ versionId }) => holder(versionId)))).every(Boolean));

    const client = await nats.connect();
    try {
      const { versionId } = versions[0];
      const kv = await new Kvm(client).open('svc_ready');
      const revision = (await kv.get(versionId))!.revision;
      const seen: string[] = [];
      let lastAt = Date.now();
      // Every message in the installation's account, but the head consumers' own pull requests and heartbeats.
      const all = client.subscribe('>', {
        callback: (_error, msg) => {
          if (msg.subject.startsWith('$JS.API.CONSUMER.MSG.NEXT.') || msg.headers?.code === 100) return;
          seen.push(msg.subject);
          lastAt = Date.now();
        },
      });
      // A head's holder opens its consumer just after it took the lock: on a loaded machine, after the lock
      // is seen. Idle starts once that is done.
      await until('the replicas to settle (a second without a message)', async () => Date.now() - lastAt > 1000);
      seen.length = 0;
      // Placement announces every version after every round.
      for (let round = 0; round < 20; round++) for (const { versionId: id, instance } of versions) pair[0].ready(id, [instance()]);
      // Longer than any poll the replicas had (a head try every 0.5 s, depths every second).
      await new Promise((resolve) => setTimeout(resolve, 2500));
      all.unsubscribe();
      t.diagnostic(`${seen.length} messages in 2.5 s of idle with 2 replicas and 3 versions`);
      assert.deepEqual(seen, [], 'no message while idle');
      assert.equal((await kv.get(versionId))!.revision, revision, 'the unchanged set was not written again');
    } finally {
      await client.close();
    }
  });

  test('a version placement no longer knows: its stream and keys are deleted, every replica lets it go; deployed again, it serves', async () => {
    const { pair, granted, enqueue } = await replicas(2);
    const { versionId, request, instance } = version(1);
    const told = new Map<string, number>();
    pair[1].onInstances((id, instances) => id === versionId && told.set(id, instances.length));
    pair[0].ready(versionId, [instance()]);
    await until('the second replica to learn the instance', async () => told.get(versionId) === 1);
    await enqueue(0, request('holds the slot'));
    await enqueue(1, request('waits'));
    assert.equal(granted.length, 1);
    assert.equal(await nats.ticketsTaken(versionId), 1, 'a stream with a ticket');

    await pair[0].retain(new Set());
    await until('the second replica to let the version go', async () => told.get(versionId) === 0);
    granted[0].grant.release('done');
    // A release after the deletion writes nothing back.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const client = await nats.connect();
    try {
      const streams: string[] = [];
      for await (const name of (await jetstreamManager(client)).streams.names()) streams.push(name);
      assert.ok(!streams.includes(`SVC_Q_${versionId}`), `no queue stream left: ${streams.join(', ')}`);
      const kvm = new Kvm(client);
      for (const bucket of ['svc_ready', 'svc_slots', 'svc_heads']) {
        const keys: string[] = [];
        for await (const key of await (await kvm.open(bucket)).keys()) keys.push(key);
        assert.ok(!keys.includes(versionId), `no key of the version in ${bucket}: ${keys.join(', ')}`);
      }
    } finally {
      await client.close();
    }
    assert.deepEqual(granted.map((entry) => entry.id), ['holds the slot'], 'the waiting request went with the stream (the service moves it on)');

    pair[0].ready(versionId, [instance()]);
    await until('the second replica to learn the instance again', async () => told.get(versionId) === 1);
    await enqueue(1, request('after'));
    await until('a request on the version deployed again', async () => granted.length === 2);
    assert.equal(granted[1].id, 'after');
  });

  test('the head\'s holder cut off while it held tickets: the replica whose tickets wait takes the head over and they are granted in order', async (t) => {
    const { pair, granted, enqueue } = await replicas(2);
    const { versionId, request, instance } = version(1);
    const learned = new Promise<void>((resolve) => pair[1].onInstances(() => resolve()));
    pair[0].ready(versionId, [instance()]);
    await learned;
    await until('a holder', async () => holder(versionId));
    const held = (await holder(versionId)) === pair[0].replicaId ? 0 : 1;
    const [head, other] = [pair[held], pair[1 - held]];
    await enqueue(held, request('on the holder'));
    assert.equal(granted.length, 1, 'the only slot, on the holder');
    const ids = ['w1', 'w2', 'w3'];
    for (const id of ids) await enqueue(1 - held, request(id));
    await until('the holder to take the tickets', async () => (await nats.ticketsTaken(versionId)) === ids.length);
    // Its connection goes as a kill -9 takes it: no release of the head, the slot or the tickets.
    const cut = Date.now();
    await head.connection.close();
    await until('the first waiting request granted', async () => granted.length === 2, 60_000);
    t.diagnostic(`granted ${Date.now() - cut} ms after the holder was cut off`);
    assert.equal(await holder(versionId), other.replicaId, 'the head passed to the replica whose tickets waited');
    for (let next = 1; next < ids.length; next++) {
      granted.at(-1)!.grant.release('done');
      await until(`grant of ${ids[next]}`, async () => granted.length === next + 2);
    }
    assert.deepEqual(granted.slice(1).map((entry) => [entry.id, entry.replica]), ids.map((id) => [id, 1 - held]), 'in order, on their replica');
  });

  test('streams and buckets take their count of copies from natsReplicas; an older heads bucket whose entries expired is brought in line; a count the server cannot keep is said in one line naming the setting', async () => {
    const client = await nats.connect();
    try {
      const jsm = await jetstreamManager(client);
      await jsm.streams.delete('KV_svc_heads').catch(() => false);
      // As releases before this one made it: its entries expired 10 s after the last renewal.
      await new Kvm(client).create('svc_heads', { history: 1, ttl: 10_000 });
      const { pair } = await replicas(1);
      const { versionId, request, instance } = version(1);
      pair[0].ready(versionId, [instance()]);
      await pair[0].enqueue(request('holds'));
      await pair[0].enqueue(request('waits'));
      for (const stream of ['KV_svc_ready', 'KV_svc_slots', 'KV_svc_heads', `SVC_Q_${versionId}`]) {
        const { config } = await jsm.streams.info(stream);
        assert.equal(config.num_replicas, 1, stream);
        if (stream.startsWith('KV_')) assert.equal(config.max_age, 0, `${stream}: entries that do not expire`);
      }
      const lines: string[] = [];
      const log = createLogger('info', { write: (line: string) => void lines.push(line) });
      const three = await JetStreamQueue.connect({ nats: { ...nats.settings, natsReplicas: 3 }, signer, maxDepth: 100, log, adopt: async () => undefined });
      queues.push(three);
      // It still makes the queue of a version it meets first (with the one copy the server keeps).
      const another = version(1);
      await three.enqueue(another.request('waits for an instance'));
      assert.equal(await nats.ticketsTaken(another.versionId), 1);
      const warnings = lines.map((line) => JSON.parse(line)).filter((line) => line.level === 40).map((line) => line.msg);
      assert.deepEqual(warnings, ['invocation.natsReplicas (SVC_NATS_REPLICAS) is 3, but the server keeps 1 (a single server is no cluster)']);
    } finally {
      await client.close();
    }
  });
});
