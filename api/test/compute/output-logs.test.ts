// What the agent keeps of an instance's output (compute/output-logs.ts): lines as written across chunks,
// secret values redacted even when a chunk splits them, the per-instance bound, the retention after exit,
// since/tail, following, and the `log-lines` answers to a `logs` request.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { OutputLogs, serveLogs } from '../../src/compute/output-logs.ts';
import type { LogLinesMessage } from '../../src/compute/protocol.ts';
import { instanceSpec } from './helpers.ts';

const spec = (instanceId: string, functionVersionId = 'version-a') => ({
  ...instanceSpec('test/any'), instanceId, functionVersionId,
  secrets: [{ name: 'API_TOKEN', value: 'tok-0123456789' }, { name: 'DB', value: { user: 'bob', password: 'hunter2-secret' } }],
});

function clock() {
  let now = Date.parse('2026-11-27T10:00:00.000Z');
  return { now: () => now, advance: (ms: number) => { now += ms; } };
}

test('lines are kept as written, per stream, with their time; secrets redacted even across chunks (values under 4 characters are not)', () => {
  const time = clock();
  const logs = new OutputLogs({}, time.now);
  const log = logs.open(spec('i-1'));
  log.write('stdout', Buffer.from('first line\r\nsecond with tok-0123'));
  log.write('stderr', Buffer.from('an error\n'));
  time.advance(1000);
  log.write('stdout', Buffer.from('456789 in it\npassword hunter2-secret and user bob\n'));
  const euro = Buffer.from('price: 3 €\n');
  log.write('stdout', euro.subarray(0, euro.length - 3));
  log.write('stdout', euro.subarray(euro.length - 3));
  log.write('stderr', Buffer.from('no newline at the end'));
  logs.exited(log);
  const lines = logs.read({ functionVersionId: 'version-a' });
  assert.deepEqual(lines.map((line) => [line.stream, line.text]), [
    ['stdout', 'first line'],
    ['stderr', 'an error'],
    ['stdout', 'second with [redacted] in it'],
    ['stdout', 'password [redacted] and user bob'],
    ['stdout', 'price: 3 €'],
    ['stderr', 'no newline at the end'],
  ]);
  assert.equal(lines[0].timestamp, '2026-11-27T10:00:00.000Z');
  assert.equal(lines[2].timestamp, '2026-11-27T10:00:01.000Z');
  assert.ok(lines.every((line) => line.instanceId === 'i-1'));
  assert.deepEqual(log.lastTexts(2), ['price: 3 €', 'no newline at the end']);

  const task = logs.open(spec('task-1'));
  logs.redactAlso('task-1', [{ value: 'tok-updated-later' }]);
  task.write('stdout', Buffer.from('old tok-0123456789 and new tok-updated-later\n'));
  assert.equal(logs.read({ functionVersionId: 'version-a', instanceId: 'task-1' })[0].text, 'old [redacted] and new [redacted]', 'updated secrets too');
});

test('an instance keeps at most its bound, oldest lines first out; and is forgotten a while after it exits', () => {
  const time = clock();
  const logs = new OutputLogs({ maxBytesPerInstance: 10 * (64 + 8), retentionMs: 60_000 }, time.now);
  const log = logs.open(spec('i-1'));
  for (let n = 0; n < 100; n++) log.write('stdout', Buffer.from(`line ${String(n).padStart(3, '0')}\n`));
  const kept = logs.read({ functionVersionId: 'version-a' });
  assert.equal(kept.length, 10);
  assert.equal(kept.at(-1)!.text, 'line 099');
  logs.exited(log);
  time.advance(59_000);
  assert.equal(logs.read({ functionVersionId: 'version-a' }).length, 10, 'kept within the retention');
  const again = logs.open(spec('i-1'));
  assert.equal(again, log, 'a restart under the same id writes on into the same log');
  logs.exited(again);
  time.advance(61_000);
  assert.deepEqual(logs.read({ functionVersionId: 'version-a' }), [], 'forgotten after it');
});

test('read selects by version and instance, since and tail; follow hears new lines of its selection only', () => {
  const time = clock();
  const logs = new OutputLogs({}, time.now);
  const one = logs.open(spec('i-1'));
  const two = logs.open(spec('i-2'));
  const other = logs.open(spec('i-3', 'version-b'));
  one.write('stdout', Buffer.from('one early\n'));
  time.advance(10);
  two.write('stdout', Buffer.from('two\n'));
  other.write('stdout', Buffer.from('other version\n'));
  time.advance(10);
  one.write('stdout', Buffer.from('one late\n'));
  assert.deepEqual(logs.read({ functionVersionId: 'version-a' }).map((line) => line.text), ['one early', 'two', 'one late']);
  assert.deepEqual(logs.read({ functionVersionId: 'version-a', instanceId: 'i-1' }).map((line) => line.text), ['one early', 'one late']);
  assert.deepEqual(logs.read({ functionVersionId: 'version-a', since: Date.parse('2026-11-27T10:00:00.010Z') }).map((line) => line.text), ['two', 'one late']);
  assert.deepEqual(logs.read({ functionVersionId: 'version-a', tail: 1 }).map((line) => line.text), ['one late']);

  const heard: string[] = [];
  const stop = logs.follow({ functionVersionId: 'version-a', instanceId: 'i-2' }, (line) => heard.push(line.text));
  one.write('stdout', Buffer.from('not i-2\n'));
  two.write('stderr', Buffer.from('i-2 again\n'));
  other.write('stdout', Buffer.from('not version-a\n'));
  stop();
  two.write('stdout', Buffer.from('after stop\n'));
  assert.deepEqual(heard, ['i-2 again']);
});

test('serveLogs: the kept lines in batches, the last caughtUp (and done unless following), then new lines', async () => {
  const logs = new OutputLogs();
  const log = logs.open(spec('i-1'));
  for (let n = 0; n < 1200; n++) log.write('stdout', Buffer.from(`kept ${n}\n`));

  const once: LogLinesMessage[] = [];
  serveLogs(logs, { type: 'logs', streamId: 's1', functionVersionId: 'version-a', follow: false }, (message) => once.push(message));
  assert.deepEqual(once.map((message) => [message.lines.length, message.caughtUp, message.done]), [[500, undefined, undefined], [500, undefined, undefined], [200, true, true]]);

  const empty: LogLinesMessage[] = [];
  serveLogs(logs, { type: 'logs', streamId: 's2', functionVersionId: 'version-z', follow: false }, (message) => empty.push(message));
  assert.deepEqual(empty, [{ type: 'log-lines', streamId: 's2', lines: [], caughtUp: true, done: true }]);

  const followed: LogLinesMessage[] = [];
  const stop = serveLogs(logs, { type: 'logs', streamId: 's3', functionVersionId: 'version-a', tail: 2, follow: true }, (message) => followed.push(message));
  assert.deepEqual(followed.map((message) => [message.lines.map((line) => line.text), message.caughtUp, message.done]), [[['kept 1198', 'kept 1199'], true, undefined]]);
  log.write('stdout', Buffer.from('live 1\nlive 2\n'));
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(followed.at(-1)!.lines.map((line) => line.text), ['live 1', 'live 2'], 'the lines of one tick in one message');
  stop();
  log.write('stdout', Buffer.from('after stop\n'));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(followed.length, 2);
});
