// Fifo (invocation/queue.ts): the order requests wait in, per version.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Fifo } from '../../src/invocation/queue.ts';

const item = (id: string) => ({ id });
const drain = (fifo: Fifo<{ id: string }>) => {
  const out: string[] = [];
  for (let next = fifo.shift(); next; next = fifo.shift()) out.push(next.id);
  return out;
};

test('first in, first out; unshift puts a request back at the head', () => {
  const fifo = new Fifo<{ id: string }>();
  for (const id of ['a', 'b', 'c']) fifo.push(item(id));
  assert.equal(fifo.shift()?.id, 'a');
  fifo.unshift(item('a2'));
  fifo.push(item('d'));
  assert.equal(fifo.size, 4);
  assert.deepEqual(drain(fifo), ['a2', 'b', 'c', 'd']);
  assert.equal(fifo.size, 0);
  assert.equal(fifo.shift(), undefined);
});

test('removal leaves the others in order; positions count only who is still waiting', () => {
  const fifo = new Fifo<{ id: string }>();
  for (const id of ['a', 'b', 'c', 'd']) fifo.push(item(id));
  assert.equal(fifo.position('c'), 3);
  assert.equal(fifo.remove('b'), true);
  assert.equal(fifo.remove('b'), false, 'removed once');
  assert.equal(fifo.position('c'), 2);
  assert.equal(fifo.position('zz'), undefined);
  assert.equal(fifo.size, 3);
  assert.deepEqual(drain(fifo), ['a', 'c', 'd']);
});

test('a long queue compacts its head and keeps its order', () => {
  const fifo = new Fifo<{ id: string }>();
  for (let i = 0; i < 5000; i++) fifo.push(item(String(i)));
  for (let i = 0; i < 3000; i++) assert.equal(fifo.shift()?.id, String(i));
  fifo.unshift(item('back'));
  assert.equal(fifo.position('3000'), 2);
  assert.equal(fifo.position('4999'), 2001);
  const rest = drain(fifo);
  assert.equal(rest[0], 'back');
  assert.deepEqual(rest.slice(1), Array.from({ length: 2000 }, (_, i) => String(3000 + i)));
});
