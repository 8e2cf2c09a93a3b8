// Invocation (invocation/invocation.ts): a request's life as named transitions, queued → running → done
// with a detour back to queued; a transition its state does not allow is refused.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ReadyInstance } from '../../src/control/instances/service.ts';
import { Invocation, type ClientSink } from '../../src/invocation/invocation.ts';
import type { Grant } from '../../src/invocation/slots.ts';

const target = { ncaId: 'acct', functionId: 'f', versionId: 'v1', functionName: 'fn', inferenceUrl: '/echo' };
const other = { ...target, versionId: 'v2' };
const request = { headers: {}, body: Buffer.alloc(0), sse: false };
const result = { status: 200, headers: {}, body: Buffer.from('ok') };
const slot = (): Grant => ({ instance: {} as ReadyInstance, release: () => {} });
const sink = (): ClientSink => ({ start: () => assert.fail('not started'), result: () => {}, pending: () => {}, fail: () => {} });

test('queued → running → done; a waiting one moves, a running one does not', () => {
  const invocation = new Invocation('r1', target, 'me', request);
  assert.equal(invocation.state, 'queued');
  invocation.moveTo(other);
  assert.equal(invocation.versionId, 'v2');
  invocation.grant(slot());
  assert.equal(invocation.state, 'running');
  assert.throws(() => invocation.moveTo(target), /only a queued request may move/);
  assert.throws(() => invocation.grant(slot()), /only a queued request may be granted a slot/);
  invocation.finish(result, 1000);
  assert.equal(invocation.state, 'done');
  assert.equal(invocation.result, result);
  assert.equal(invocation.finishedAt, 1000);
  assert.throws(() => invocation.finish(result, 2000), /done already/);
  assert.equal(invocation.finishedAt, 1000, 'the refused finish changed nothing');
});

test('the slot granted is what the runner awaits; queued again, it awaits the next one', async () => {
  const invocation = new Invocation('r1', target, 'me', request);
  assert.throws(() => invocation.requeue(), /only a running request may queue again/);
  const first = slot();
  invocation.grant(first);
  assert.equal(await invocation.granted(), first);
  invocation.requeue();
  assert.equal(invocation.state, 'queued');
  const waiting = invocation.granted();
  const second = slot();
  invocation.grant(second);
  assert.equal(invocation.state, 'running');
  assert.equal(await waiting, second);
});

test('the poll window passes unless the sink was taken; the sink is taken once', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const client = sink();
  const passed: string[] = [];
  const left = new Invocation('r1', target, 'me', request, client);
  left.startPollWindow(100, () => passed.push('r1'));
  const answered = new Invocation('r2', target, 'me', request, client);
  answered.startPollWindow(100, () => passed.push('r2'));
  assert.equal(answered.takeSink(), client);
  assert.equal(answered.takeSink(), undefined);
  t.mock.timers.tick(100);
  assert.deepEqual(passed, ['r1'], 'the window of the answered one closed with its sink');
  const noClient = new Invocation('r3', target, 'me', request);
  noClient.startPollWindow(100, () => passed.push('r3'));
  t.mock.timers.tick(100);
  assert.deepEqual(passed, ['r1'], 'no client, no window');
});

test('stored once, claimed only when stored; a done request is not stored', async () => {
  const invocation = new Invocation('r1', target, 'me', request);
  assert.throws(() => invocation.claim(), /only a stored request is claimed/);
  const stored = Promise.resolve();
  invocation.persisted(stored);
  assert.equal(invocation.durable, true);
  assert.equal(invocation.stored, stored);
  assert.throws(() => invocation.persisted(stored), /stored already/);
  invocation.claim();
  assert.equal(invocation.claimed, true);
  const done = new Invocation('r2', target, 'me', request);
  done.finish(result, 1);
  assert.throws(() => done.persisted(stored), /done/);
});

test('read back from the store: durable, and done when it has its result', () => {
  const waiting = Invocation.fromStore('r1', target, 'me', request);
  assert.equal(waiting.durable, true);
  assert.equal(waiting.state, 'queued');
  const finished = Invocation.fromStore('r2', target, 'me', request, { result, at: 5 });
  assert.equal(finished.state, 'done');
  assert.equal(finished.finishedAt, 5);
});

test('a cancelled request stops its exchange, also one that starts after; a stored or done one is not cancelled', () => {
  const invocation = new Invocation('r1', target, 'me', request, sink());
  let stopped = 0;
  invocation.grant(slot());
  invocation.whileSending(() => stopped++);
  invocation.cancel();
  assert.equal(stopped, 1);
  assert.equal(invocation.cancelled, true);
  assert.equal(invocation.takeSink(), undefined, 'the client was let go');
  invocation.whileSending(() => stopped++);
  assert.equal(stopped, 2, 'an exchange starting after the cancel is stopped at once');
  const stored = new Invocation('r2', target, 'me', request);
  stored.persisted(Promise.resolve());
  assert.throws(() => stored.cancel(), /stored/);
});

test('pollers wake when the result arrives, on shutdown, or when their time is up', async () => {
  const invocation = new Invocation('r1', target, 'me', request);
  const polled = invocation.untilResult(60_000);
  invocation.finish(result, 1);
  await polled;
  await invocation.untilResult(60_000); // has its result: at once
  const other = new Invocation('r2', target, 'me', request);
  const shut = other.untilResult(60_000);
  other.shutDown();
  await shut;
  assert.equal(other.cancelled, true);
  await new Invocation('r3', target, 'me', request).untilResult(1); // time up: resolves without a result
});

test('progress is clamped to whole percents from 0 to 100', () => {
  const invocation = new Invocation('r1', target, 'me', request);
  const seen = [[140.2, { partial: true }], [-3], [41.6]].map(([percent, partial]) => {
    invocation.reportProgress(percent as number, partial);
    return invocation.progress;
  });
  assert.deepEqual(seen, [{ percent: 100, partialResponse: { partial: true } }, { percent: 0, partialResponse: undefined }, { percent: 42, partialResponse: undefined }]);
});
