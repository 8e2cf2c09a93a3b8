// Tickets (invocation/tickets.ts): this replica's requests waiting in the shared queue; a grant takes one
// once, a grant asked again is known by its lease, and the oldest ticket per version says when to look at
// the head's holder.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Invocation } from '../../src/invocation/invocation.ts';
import { Tickets } from '../../src/invocation/tickets.ts';

const request = (id: string, versionId = 'v1') =>
  new Invocation(id, { ncaId: 'acct', functionId: 'f', versionId, functionName: 'fn', inferenceUrl: '/' }, 'me', { headers: {}, body: Buffer.alloc(0), sse: false });

test('a grant takes a waiting request once; asked again with the same lease it is known, with another it is not', () => {
  const tickets = new Tickets();
  const r1 = request('r1');
  const waiting = tickets.add(r1);
  assert.equal(tickets.waits(waiting), true);
  assert.equal(tickets.take('r1', 'lease-a'), r1);
  assert.equal(tickets.waits(waiting), false);
  assert.equal(tickets.take('r1', 'lease-a'), undefined, 'no longer waiting');
  assert.equal(tickets.tookWith('r1', 'lease-a'), true, 'the same grant asked again');
  assert.equal(tickets.tookWith('r1', 'lease-b'), false);
  assert.equal(tickets.take('unknown', 'lease-c'), undefined);
});

test('a removed request is neither waiting nor taken', () => {
  const tickets = new Tickets();
  tickets.add(request('r1'));
  assert.equal(tickets.remove('r1')?.invocation.id, 'r1');
  assert.equal(tickets.remove('r1'), undefined);
  assert.equal(tickets.take('r1', 'lease-a'), undefined);
  assert.equal(tickets.tookWith('r1', 'lease-a'), false);
});

test('the oldest ticket of a version, whether one waited long, and the versions waited for', (t) => {
  t.mock.timers.enable({ apis: ['Date'], now: 5_000 });
  const tickets = new Tickets();
  tickets.add(request('r1', 'v1'));
  t.mock.timers.tick(200);
  tickets.add(request('r2', 'v1'));
  tickets.add(request('r3', 'v2'));
  assert.equal(tickets.oldest('v1'), 5_000);
  assert.equal(tickets.oldest('v2'), 5_200);
  assert.equal(tickets.oldest('v3'), undefined);
  assert.equal(tickets.has('v1', 200), true);
  assert.equal(tickets.has('v2', 200), false);
  assert.equal(tickets.has('v2'), true);
  assert.deepEqual([...tickets.versions()].sort(), ['v1', 'v2']);
  tickets.remove('r1');
  assert.equal(tickets.oldest('v1'), 5_200);
});
