// Session (streaming/session.ts): a streaming session's life as named transitions, waiting → granted →
// connected ⇄ detached, any of them → ended; a transition its state does not allow is refused, and each
// state's clock says which one ran out.
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test, type TestContext } from 'node:test';
import type { ReadyInstance } from '../../src/control/instances/service.ts';
import { ABANDON_MS, Session, type Expiry } from '../../src/streaming/session.ts';

const version = { versionId: 'v1', ncaId: 'owner', name: 'fn', inferenceUrl: '/sign_in' };
const instance: ReadyInstance = {
  instanceId: 'i1', versionId: 'v1', clusterId: 'c', endpoint: { host: '127.0.0.1', ports: { inference: 1, health: 1, control: 2 } },
  maxRequestConcurrency: 1, gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', backend: 'svc-local', region: 'local',
};
const subject = { kind: 'api-key' as const, credentialId: 'k1', ownerId: 'me' };

/** A session whose clocks run on mocked time (from 0); `expired` lists which clocks ran out. */
function started(t: TestContext) {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 });
  const expired: Expiry[] = [];
  const session = new Session({ id: 's1', ncaId: 'caller', subject, functionId: 'f', candidates: [version] }, (_, expiry) => expired.push(expiry));
  return { session, expired };
}

test('waiting → granted → connected → detached → connected → ended, as the owner lists it', (t) => {
  const { session, expired } = started(t);
  assert.deepEqual(session.listed(3), { sessionId: 's1', state: 'WAITING', subject, joinedAt: new Date(0).toISOString(), position: 3 });
  t.mock.timers.tick(1000);
  session.grant(version, instance, 10_000);
  assert.equal(session.state, 'granted');
  assert.equal(session.instance, instance);
  assert.equal(session.listed(0).state, 'GRANTED');
  t.mock.timers.tick(1000);
  const browser = new PassThrough();
  session.connect(browser);
  assert.equal(session.state, 'connected');
  assert.equal(session.connectedOnce, true);
  assert.equal(session.listed(0).connectedAt, new Date(2000).toISOString());
  assert.equal(session.clientClosed(browser), true);
  assert.equal(session.client, undefined);
  session.detach(60_000);
  assert.deepEqual(session.listed(0), {
    sessionId: 's1', state: 'RESUMING', subject, joinedAt: new Date(0).toISOString(), instanceId: 'i1', versionId: 'v1',
    grantedAt: new Date(1000).toISOString(), connectedAt: new Date(2000).toISOString(), resumeBy: new Date(62_000).toISOString(),
  });
  t.mock.timers.tick(5000);
  session.connect(new PassThrough());
  assert.equal(session.state, 'connected');
  assert.equal(session.listed(0).connectedAt, new Date(2000).toISOString(), 'connected first at, not again');
  assert.equal(session.listed(0).resumeBy, undefined);
  session.end();
  assert.equal(session.state, 'ended');
  assert.equal(session.ended, true);
  t.mock.timers.tick(120_000);
  assert.deepEqual(expired, [], 'no clock outlives the state it was started for');
});

test('a transition its state does not allow is refused and changes nothing', (t) => {
  const { session } = started(t);
  const browser = new PassThrough();
  assert.throws(() => session.connect(browser), /session s1 is waiting; only a granted or connected or detached session may connect/);
  assert.throws(() => session.detach(1000), /only a connected session may detach/);
  assert.throws(() => session.resumeWithin(1000), /only a detached session may have a resume window/);
  assert.equal(session.state, 'waiting');
  session.grant(version, instance, 10_000);
  assert.throws(() => session.grant(version, instance, 10_000), /session s1 is granted; only a waiting session may be granted/);
  assert.throws(() => session.poll(1000), /only a waiting session may be polled/);
  session.connect(browser);
  assert.throws(() => session.detach(1000), /has its browser connected; only one without may detach/, 'a connected browser is no drop');
  assert.equal(session.state, 'connected');
  session.end();
  assert.throws(() => session.end(), /session s1 is ended; only a waiting or granted or connected or detached session may end/);
  assert.throws(() => session.connect(browser), /is ended/);
  assert.throws(() => session.listed(0), /only a live session is listed/);
  assert.equal(session.state, 'ended');
});

test('a closed socket counts only when it is the live session\'s own; a new tab\'s socket closes the old one', (t) => {
  const { session } = started(t);
  session.grant(version, instance, 10_000);
  const first = new PassThrough();
  const second = new PassThrough();
  session.connect(first);
  session.connect(second);
  assert.equal(first.destroyed, true, 'the old tab\'s socket is closed');
  assert.equal(second.destroyed, false);
  assert.equal(session.clientClosed(first), false, 'not its socket any more');
  assert.equal(session.client, second);
  session.end();
  assert.equal(session.clientClosed(second), false, 'an ended session has nothing to lose');
  assert.equal(session.client, second, 'the browser keeps its socket: the retired container says bye on it');
});

test('a poll is held until the grant; the grant is untaken unless a WebSocket comes in time', async (t) => {
  const { session, expired } = started(t);
  let answered = false;
  const poll = session.poll(3000).then(() => { answered = true; });
  t.mock.timers.tick(1000);
  await Promise.resolve();
  assert.equal(answered, false);
  session.grant(version, instance, 10_000);
  await poll;
  t.mock.timers.tick(9999);
  assert.deepEqual(expired, []);
  t.mock.timers.tick(1);
  assert.deepEqual(expired, ['untaken']);
  assert.equal(session.state, 'granted', 'what an expiry means is the caller\'s');
});

test('a place in line nobody polls for ABANDON_MS is abandoned; a poll held meanwhile keeps it', async (t) => {
  const { session, expired } = started(t);
  const first = session.poll(1000);
  const second = session.poll(2 * ABANDON_MS);
  t.mock.timers.tick(1000);
  await first;
  t.mock.timers.tick(ABANDON_MS);
  assert.deepEqual(expired, [], 'the second poll is still held');
  t.mock.timers.tick(ABANDON_MS - 1000);
  await second;
  t.mock.timers.tick(ABANDON_MS - 1);
  const again = session.poll(1000);
  t.mock.timers.tick(1000);
  await again;
  t.mock.timers.tick(ABANDON_MS - 1);
  assert.deepEqual(expired, [], 'each poll starts the abandon clock again');
  t.mock.timers.tick(1);
  assert.deepEqual(expired, ['abandoned']);
});

/** A session granted, connected and dropped at 0, with `windowMs` to come back. */
function dropped(t: TestContext, windowMs: number) {
  const { session, expired } = started(t);
  session.grant(version, instance, 10_000);
  const browser = new PassThrough();
  session.connect(browser);
  session.clientClosed(browser);
  session.detach(windowMs);
  return { session, expired };
}

test('the resume window: shortened while someone waits, never lengthened', (t) => {
  const { session, expired } = dropped(t, 60_000);
  t.mock.timers.tick(4000);
  session.resumeWithin(10_000);
  assert.equal(session.listed(0).resumeBy, new Date(10_000).toISOString(), 'counted from the drop');
  session.resumeWithin(60_000);
  assert.equal(session.listed(0).resumeBy, new Date(10_000).toISOString());
  t.mock.timers.tick(5999);
  assert.deepEqual(expired, []);
  t.mock.timers.tick(1);
  assert.deepEqual(expired, ['unresumed']);
  assert.equal(session.state, 'detached', 'what an expiry means is the caller\'s');
});

test('a browser back within the resume window stops its clock', (t) => {
  const { session, expired } = dropped(t, 1000);
  session.connect(new PassThrough());
  t.mock.timers.tick(120_000);
  assert.deepEqual(expired, []);
  assert.equal(session.state, 'connected');
});

test('ending a session answers its held polls', async (t) => {
  const { session, expired } = started(t);
  const poll = session.poll(3000);
  session.end();
  await poll;
  t.mock.timers.tick(ABANDON_MS * 2);
  assert.deepEqual(expired, [], 'an ended session is not abandoned');
});

test('a session started under another broker is carried on: detached on its instance, its browser may resume within the window, else unresumed', (t) => {
  const { session, expired } = started(t);
  t.mock.timers.tick(5000);
  session.carryOn(version, instance, { grantedAt: 1000, connectedAt: 2000 }, 30_000);
  assert.equal(session.state, 'detached');
  assert.equal(session.connectedOnce, true);
  assert.deepEqual(session.listed(0), {
    sessionId: 's1', state: 'RESUMING', subject, joinedAt: new Date(0).toISOString(), instanceId: 'i1', versionId: 'v1',
    grantedAt: new Date(1000).toISOString(), connectedAt: new Date(2000).toISOString(), resumeBy: new Date(35_000).toISOString(),
  });
  assert.throws(() => session.carryOn(version, instance, { grantedAt: 1000, connectedAt: 2000 }, 30_000), /only a waiting session may be carried on/);
  t.mock.timers.tick(29_999);
  assert.deepEqual(expired, []);
  t.mock.timers.tick(1);
  assert.deepEqual(expired, ['unresumed']);
});
