// JetStreamQueue (invocation/jetstream-queue.ts) over a version's life, on a real NATS JetStream with a
// server of the test's own: replicas that idle say nothing to the server (watches, not polls; an unchanged
// ready set is never written again), a version placement no longer knows leaves no key behind, and the
// slots of a replica cut off go to the requests waiting on another, in order, once it is found gone.
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
      const queue = await JetStreamQueue.connect({ nats: nats.settings, signer, maxDepth: 100, log: createLogger('silent') });
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

  test('idle replicas send nothing: no polls, and a ready set announced again unchanged is not written', async (t) => {
    const { pair } = await replicas(2);
    const versions = [version(2), version(2), version(2)];
    const learned = new Set<string>();
    pair[1].onInstances((versionId) => learned.add(versionId));
    for (const { versionId, instance } of versions) pair[0].ready(versionId, [instance()]);
    await until('the second replica to learn every version', async () => learned.size === versions.length);

    const client = await nats.connect();
    try {
      const { versionId } = versions[0];
      const kv = await new Kvm(client).open('svc_ready');
      const revision = (await kv.get(versionId))!.revision;
      const seen: string[] = [];
      let lastAt = Date.now();
      // Every message in the installation's account, but the watches' heartbeats.
      const all = client.subscribe('>', {
        callback: (_error, msg) => {
          if (msg.headers?.code === 100) return;
          seen.push(msg.subject);
          lastAt = Date.now();
        },
      });
      await until('the replicas to settle (a second without a message)', async () => Date.now() - lastAt > 1000);
      seen.length = 0;
      // Placement announces every version after every round.
      for (let round = 0; round < 20; round++) for (const { versionId: id, instance } of versions) pair[0].ready(id, [instance()]);
      // Longer than any poll the replicas of earlier releases had (a head try every 0.5 s, depths every second).
      await new Promise((resolve) => setTimeout(resolve, 2500));
      all.unsubscribe();
      t.diagnostic(`${seen.length} messages in 2.5 s of idle with 2 replicas and 3 versions`);
      assert.deepEqual(seen, [], 'no message while idle');
      assert.equal((await kv.get(versionId))!.revision, revision, 'the unchanged set was not written again');
    } finally {
      await client.close();
    }
  });

  test('a version placement no longer knows: its keys are deleted, every replica lets it go; deployed again, it serves', async () => {
    const { pair, granted, enqueue } = await replicas(2);
    const { versionId, request, instance } = version(1);
    const told = new Map<string, number>();
    pair[1].onInstances((id, instances) => id === versionId && told.set(id, instances.length));
    pair[0].ready(versionId, [instance()]);
    await until('the second replica to learn the instance', async () => told.get(versionId) === 1);
    enqueue(0, request('holds the slot'));
    await until('the first grant', async () => granted.length === 1);
    const waits = request('waits');
    enqueue(1, waits);

    await pair[0].retain(new Set());
    await until('the second replica to let the version go', async () => told.get(versionId) === 0);
    granted[0].grant.release('done');
    // A release after the deletion writes nothing back.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const client = await nats.connect();
    try {
      const kvm = new Kvm(client);
      // Read key by key: the bucket's key listing was seen to name a key whose entry was already deleted.
      for (const bucket of ['svc_ready', 'svc_slots']) {
        const entry = await (await kvm.open(bucket)).get(versionId);
        assert.notEqual(entry?.operation, 'PUT', `no entry of the version in ${bucket}`);
      }
    } finally {
      await client.close();
    }
    assert.deepEqual(granted.map((entry) => entry.id), ['holds the slot']);
    assert.equal(pair[1].remove(waits), true, 'the waiting request still waits there: the service moves it on');

    pair[0].ready(versionId, [instance()]);
    await until('the second replica to learn the instance again', async () => told.get(versionId) === 1);
    enqueue(1, request('after'));
    await until('a request on the version deployed again', async () => granted.length === 2);
    assert.equal(granted[1].id, 'after');
  });

  test('a replica cut off while it ran the only slot: the requests waiting on the other get it once it is found gone, in order', async (t) => {
    const { pair, granted, enqueue } = await replicas(2);
    const { versionId, request, instance } = version(1);
    const learned = new Promise<void>((resolve) => pair[1].onInstances(() => resolve()));
    pair[0].ready(versionId, [instance()]);
    await learned;
    enqueue(0, request('on the first'));
    await until('the only slot, on the first', async () => granted.length === 1);
    const ids = ['w1', 'w2', 'w3'];
    for (const id of ids) enqueue(1, request(id));
    // Its connection goes as a kill -9 takes it: no release of the slot.
    const cut = Date.now();
    await pair[0].connection.close();
    await until('the first waiting request granted', async () => granted.length === 2, 60_000);
    t.diagnostic(`granted ${Date.now() - cut} ms after the first replica was cut off`);
    for (let next = 1; next < ids.length; next++) {
      granted.at(-1)!.grant.release('done');
      await until(`grant of ${ids[next]}`, async () => granted.length === next + 2);
    }
    assert.deepEqual(granted.slice(1).map((entry) => [entry.id, entry.replica]), ids.map((id) => [id, 1]), 'in order, on their replica');
  });

  test('buckets take their count of copies from natsReplicas, with entries that do not expire; the ticket queues of the release before are deleted; a count the server cannot keep is said in one line naming the setting', async () => {
    const client = await nats.connect();
    try {
      const jsm = await jetstreamManager(client);
      // As the release before left them: a heads bucket and a ticket stream per version.
      const former = `SVC_Q_${randomUUID()}`;
      await new Kvm(client).create('svc_heads', { history: 1 });
      await jsm.streams.add({ name: former, subjects: [`svc.q.${former}`] });
      await jsm.streams.add({ name: 'STAGING_Q_NOT_A_VERSION', subjects: ['staging.q.x'] });
      const { pair } = await replicas(1);
      const { versionId, request, instance } = version(1);
      pair[0].ready(versionId, [instance()]);
      pair[0].enqueue(request('holds'));
      for (const stream of ['KV_svc_ready', 'KV_svc_slots']) {
        const { config } = await jsm.streams.info(stream);
        assert.equal(config.num_replicas, 1, stream);
        assert.equal(config.max_age, 0, `${stream}: entries that do not expire`);
      }
      const streams: string[] = [];
      for await (const name of jsm.streams.names()) streams.push(name);
      assert.deepEqual(streams.filter((name) => name === former || name === 'KV_svc_heads'), [], 'the former ticket queues are gone');
      assert.ok(streams.includes('STAGING_Q_NOT_A_VERSION'), 'another installation\'s stream stays');
      const lines: string[] = [];
      const log = createLogger('info', { write: (line: string) => void lines.push(line) });
      const three = await JetStreamQueue.connect({ nats: { ...nats.settings, natsReplicas: 3 }, signer, maxDepth: 100, log });
      queues.push(three);
      const warnings = lines.map((line) => JSON.parse(line)).filter((line) => line.level === 40).map((line) => line.msg);
      assert.deepEqual(warnings, ['invocation.natsReplicas (SVC_NATS_REPLICAS) is 3, but the server keeps 1 (a single server is no cluster)']);
    } finally {
      await client.close();
    }
  });
});
