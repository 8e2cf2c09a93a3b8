// Durable results (invocation/results.ts, repo.ts) on the real store: what a restart finds, and the
// result collector's size limit.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { createLogger } from '../../src/logger.ts';
import { Invocation, type StoredResult } from '../../src/invocation/invocation.ts';
import { createInvocationsRepo } from '../../src/invocation/repo.ts';
import { DurableResults, KEEPER_GONE, REPLICA_GONE, RESTARTED, ResultCollector } from '../../src/invocation/results.ts';
import { openDatabase } from '../../src/database.ts';
import { createDatabase } from '../helpers/databases.ts';

const database = await createDatabase('sqlite');
const store = await openDatabase({ dataDir: database.dataDir });
after(async () => {
  await store.close();
  await database.drop();
});
const target = { ncaId: 'acct', functionId: 'f', versionId: 'v1', functionName: 'fn', inferenceUrl: '/echo' };
const request = (id: string) => new Invocation(id, target, 'owner', { headers: { 'x-a': '1' }, body: Buffer.from(`body of ${id}`), sse: false });

test('after a restart: queued ones wait again, a running one ends 502 (never run twice), a done one keeps its result', async () => {
  const results = new DurableResults({ repo: createInvocationsRepo(store.db), log: createLogger('silent'), now: () => new Date() });
  const [queued, running, done] = [request('00000000-0000-4000-8000-000000000001'), request('00000000-0000-4000-8000-000000000002'), request('00000000-0000-4000-8000-000000000003')];
  for (const invocation of [queued, running, done]) await results.persist(invocation);
  assert.equal(await results.claim(running), true);
  const stored: StoredResult = { status: 200, headers: { 'content-type': 'application/json', 'set-cookie': ['a', 'b'] }, body: Buffer.from('{"ok":true}') };
  await results.store(done, stored);
  await store.db.insertInto('invocations').values({
    request_id: 'corrupt', nca_id: 'acct', function_id: 'f', version_id: 'v1', state: 'queued', request: '{"headers":', body: Buffer.alloc(0),
    result: null, result_body: null, created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:00.000Z',
  }).execute();

  const recovered = new Map((await results.recover()).map((invocation) => [invocation.id, invocation]));
  assert.deepEqual([...recovered.keys()].sort(), [queued.id, running.id, done.id], 'the row that does not decode is left out');
  const back = recovered.get(queued.id)!;
  assert.equal(back.state, 'queued');
  assert.equal(back.durable, true);
  assert.deepEqual(back.request.headers, { 'x-a': '1' });
  assert.equal(back.request.body.toString(), `body of ${queued.id}`);
  assert.deepEqual(back.target, target);
  const ended = recovered.get(running.id)!;
  assert.equal(ended.result?.status, 502);
  assert.equal(JSON.parse(ended.result!.body.toString()).detail, RESTARTED);
  assert.deepEqual(recovered.get(done.id)!.result, stored);

  const again = new Map((await results.recover()).map((invocation) => [invocation.id, invocation]));
  assert.equal(again.get(running.id)!.result?.status, 502, 'the 502 was stored: a second restart finds it as a result');
});

test('a dead replica\'s running request a node keeps: left to the node while it lives, stored only as that node\'s, ended 502 once the node is gone or lost it; one no node took ends at the next look', async () => {
  const results = new DurableResults({ repo: createInvocationsRepo(store.db), log: createLogger('silent'), now: () => new Date() });
  const [kept, keptElsewhere, notKept, queued, lost, keptLate] = [0, 1, 2, 3, 4, 5].map((i) => request(`00000000-0000-4000-8000-0000000001${i}0`));
  // A client's header named like the mark is no mark.
  notKept.request.headers.keeper = 'node-1';
  for (const invocation of [kept, keptElsewhere, notKept, queued, lost, keptLate]) await results.persist(invocation, 'replica-dead');
  for (const invocation of [kept, keptElsewhere, notKept, lost, keptLate]) assert.equal(await results.claim(invocation), true);

  assert.equal(await results.keep(kept.id, 'node-1'), true);
  assert.equal(await results.keep(kept.id, 'node-1'), true, 'asked again by the same node');
  assert.equal(await results.keep(kept.id, 'node-2'), false, 'another node cannot take it over');
  assert.equal(await results.keep(keptElsewhere.id, 'node-2'), true);
  assert.equal(await results.keep(lost.id, 'node-1'), true);
  assert.equal(await results.keep(queued.id, 'node-1'), false, 'a queued request never reached an instance');

  const look = () => results.takeOverFrom('replica-self', async () => false, async (nodeId) => nodeId === 'node-1');
  const first = await look();
  assert.deepEqual(first.ended, [keptElsewhere.id], 'the one whose node is gone');
  assert.deepEqual(first.adopted.map((invocation) => invocation.id), [queued.id]);
  const detail = async (id: string) => JSON.parse((await results.find(id))!.result!.body.toString()).detail;
  assert.equal(await detail(keptElsewhere.id), KEEPER_GONE);
  for (const invocation of [kept, notKept, keptLate]) assert.equal((await results.find(invocation.id))!.state, 'running', `${invocation.id} waits`);
  assert.equal(await results.storeKept(notKept.id, 'node-1', { status: 200, headers: {}, body: Buffer.from('forged') }), false, 'a header makes no node its keeper');
  // Between two looks a node's keeper takes one of those no node had taken.
  assert.equal(await results.keep(keptLate.id, 'node-1'), true);
  assert.deepEqual((await look()).ended, [notKept.id], 'no node took it by the next look');
  assert.equal(await detail(notKept.id), REPLICA_GONE);
  assert.equal(await results.keep(notKept.id, 'node-1'), false, 'too late for a node to take it');
  for (const invocation of [kept, keptLate]) assert.equal((await results.find(invocation.id))!.state, 'running', `${invocation.id} is left to its node`);

  const answer: StoredResult = { status: 200, headers: { 'content-type': 'text/plain' }, body: Buffer.from('the instance\'s answer') };
  assert.equal(await results.storeKept(kept.id, 'node-2', answer), false, 'not node-2\'s to finish');
  assert.equal(await results.storeKept(kept.id, 'node-1', answer), true);
  assert.deepEqual((await results.find(kept.id))!.result, answer);
  assert.equal(await results.storeKept(kept.id, 'node-1', answer), false, 'stored once');

  assert.deepEqual((await results.lostBy('node-1', new Set([kept.id, keptLate.id]))), [lost.id], 'node-1 linked again without it');
  assert.equal(await detail(lost.id), KEEPER_GONE);
});

test('a response nobody waits for is kept whole up to the limit, else it becomes a 502', () => {
  const kept: StoredResult[] = [];
  const small = new ResultCollector(201, { 'content-type': 'text/plain' }, 8, (result) => kept.push(result));
  small.data(Buffer.from('abcd'));
  small.data(Buffer.from('efgh'));
  small.end();
  assert.deepEqual(kept[0], { status: 201, headers: { 'content-type': 'text/plain' }, body: Buffer.from('abcdefgh') });
  const overflows: boolean[] = [];
  const large = new ResultCollector(200, {}, 8, (result, overflowed) => {
    kept.push(result);
    overflows.push(overflowed);
  });
  large.data(Buffer.from('abcdefghi'));
  large.end();
  assert.equal(kept.length, 2, 'answered once');
  assert.equal(kept[1].status, 502);
  assert.deepEqual(overflows, [true]);
});
