// Slots and LocalQueue (invocation/slots.ts, local-queue.ts): per-instance concurrency, least loaded
// first, FIFO grants, an instance that failed benched until placement announces it again, 429 when full.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ReadyInstance } from '../../src/control/instances/service.ts';
import { Invocation } from '../../src/invocation/invocation.ts';
import { LocalQueue } from '../../src/invocation/local-queue.ts';
import { leastLoaded, Slots, type Grant } from '../../src/invocation/slots.ts';

const instance = (instanceId: string, maxRequestConcurrency: number, versionId = 'v1'): ReadyInstance => ({
  instanceId, versionId, clusterId: 'c1', maxRequestConcurrency, gpu: 'L40', instanceType: 'x', backend: 'b', region: 'r',
  endpoint: { host: '127.0.0.1', ports: { inference: 9000 + Number(instanceId.slice(1)) } } as ReadyInstance['endpoint'],
});
const target = { ncaId: 'acct', functionId: 'f', versionId: 'v1', functionName: 'fn', inferenceUrl: '/echo' };
const request = (id: string) => new Invocation(id, target, 'me', { headers: {}, body: Buffer.alloc(0), sse: false });

/** Requests whose grants are recorded in the order they come; `turn` lets the granted ones be heard. */
function recorder() {
  const grants: { id: string; instanceId: string; grant: Grant }[] = [];
  const tracked = (id: string) => {
    const invocation = request(id);
    void invocation.granted().then((grant) => grants.push({ id, instanceId: grant.instance.instanceId, grant }));
    return invocation;
  };
  return { grants, tracked };
}
const turn = () => new Promise((resolve) => setImmediate(resolve));

test('leastLoaded: the emptiest slot with room, none when all are full', () => {
  const a = { ready: instance('i1', 2), inflight: 1 };
  const b = { ready: instance('i2', 2), inflight: 0 };
  assert.equal(leastLoaded([a, b]), b);
  b.inflight = 2;
  assert.equal(leastLoaded([a, b]), a);
  a.inflight = 2;
  assert.equal(leastLoaded([a, b]), undefined);
});

test('a benched instance keeps its count and comes back when announced again', () => {
  const slots = new Slots();
  slots.ready('v1', [instance('i1', 1)]);
  const slot = slots.free('v1')!;
  slots.take(slot);
  slots.bench(slot);
  assert.equal(slots.free('v1'), undefined, 'benched: no slot');
  slots.ready('v1', [instance('i1', 1)]);
  assert.equal(slots.free('v1'), undefined, 'still running its request');
  slots.release(slot);
  assert.equal(slots.free('v1'), slot);
});

test('LocalQueue grants in arrival order, at most maxRequestConcurrency per instance, least loaded first', async () => {
  const queue = new LocalQueue({ maxDepth: 100 });
  const { grants, tracked } = recorder();
  for (const id of ['r1', 'r2', 'r3', 'r4', 'r5']) queue.enqueue(tracked(id));
  await turn();
  assert.equal(grants.length, 0, 'no instance yet');
  assert.equal(queue.depth('v1'), 5);
  queue.ready('v1', [instance('i1', 2), instance('i2', 1)]);
  await turn();
  assert.deepEqual(grants.map((g) => g.id), ['r1', 'r2', 'r3']);
  assert.deepEqual(grants.map((g) => g.instanceId).sort(), ['i1', 'i1', 'i2']);
  assert.equal(queue.depth('v1'), 2);
  assert.equal(queue.position(request('r5')), 2);
  grants.find((g) => g.instanceId === 'i2')!.grant.release('done');
  await turn();
  assert.equal(grants[3].id, 'r4');
  assert.equal(grants[3].instanceId, 'i2');
  grants[3].grant.release('done');
  grants[3].grant.release('done');
  await turn();
  assert.equal(grants.length, 5, 'a grant released twice frees one slot');
  assert.equal(queue.depth('v1'), 0);
});

test('a failed instance gets nothing more; a request put back waits at the head', async () => {
  const queue = new LocalQueue({ maxDepth: 100 });
  const { grants, tracked } = recorder();
  queue.ready('v1', [instance('i1', 1), instance('i2', 1)]);
  for (const id of ['r1', 'r2', 'r3']) queue.enqueue(tracked(id));
  await turn();
  const failed = grants.find((g) => g.instanceId === 'i1')!;
  failed.grant.release('failed');
  queue.requeue(tracked(failed.id));
  assert.equal(queue.position(request(failed.id)), 1, 'back at the head');
  await turn();
  assert.equal(grants.length, 2, 'i1 is benched, i2 busy');
  grants.find((g) => g.instanceId === 'i2')!.grant.release('done');
  await turn();
  assert.deepEqual(grants.slice(2).map((g) => [g.id, g.instanceId]), [[failed.id, 'i2']]);
});

test('LocalQueue refuses past maxDepth with a 429 and removes a request whose client left', () => {
  const queue = new LocalQueue({ maxDepth: 2 });
  const [r1, r2] = [request('r1'), request('r2')];
  queue.enqueue(r1);
  queue.enqueue(r2);
  assert.throws(() => queue.enqueue(request('r3')), (error: { status?: number; headers?: Record<string, string> }) => error.status === 429 && error.headers?.['retry-after'] === '1');
  assert.equal(queue.remove(r1), true);
  assert.equal(queue.remove(r1), false);
  assert.equal(queue.position(r2), 1);
});
