// outlastFailover on a NATS server of its own: a JetStream publish that finds no stream to take it is
// answered "no responders", as one is while a cluster elects a stream's leader after a server died. It
// goes again until the stream is there, gives up with a 503 the caller may retry, and lets any other
// error through at once.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { Problem } from '../../src/domain/problem.ts';
import { leaderless, outlastFailover } from '../../src/invocation/failover.ts';
import { natsServerAvailable, startNats, type TestNats } from '../helpers/nats.ts';

describe('outlastFailover', { skip: !natsServerAvailable() }, () => {
  let nats: TestNats;
  let nc: NatsConnection;

  before(async () => {
    nats = await startNats();
    nc = await nats.connect();
  });
  after(async () => {
    await nc?.close();
    await nats?.stop();
  });

  test('a publish with no stream to take it goes again, and lands once the stream is there', async () => {
    const js = jetstream(nc);
    let tries = 0;
    const publishing = outlastFailover(() => {
      tries++;
      return js.publish('late.ticket', 'ticket');
    });
    await new Promise((resolve) => setTimeout(resolve, 400));
    await (await jetstreamManager(nc)).streams.add({ name: 'LATE', subjects: ['late.>'] });
    const ack = await publishing;
    assert.equal(ack.stream, 'LATE');
    assert.ok(tries >= 2, `tried ${tries} times`);
  });

  test('no stream within the time given: a 503 that says to try again', async () => {
    const js = jetstream(nc);
    const failure = await outlastFailover(() => js.publish('never.ticket', 'ticket'), { withinMs: 500 }).catch((error: unknown) => error);
    assert.ok(failure instanceof Problem, String(failure));
    assert.equal(failure.status, 503);
    assert.equal(failure.headers['retry-after'], '2');
  });

  test('a time-out goes again only when the operation is idempotent, else it is a 503 at once; any other error goes through', async () => {
    const timeout = Object.assign(new Error('timeout'), { name: 'TimeoutError' });
    let tries = 0;
    const once = await outlastFailover(async () => {
      tries++;
      throw timeout;
    }).catch((error: unknown) => error);
    assert.ok(once instanceof Problem && once.status === 503, String(once));
    assert.equal(tries, 1);
    tries = 0;
    assert.equal(await outlastFailover(async () => {
      if (++tries < 3) throw timeout;
      return 'read';
    }, { idempotent: true }), 'read');
    assert.equal(tries, 3);
    const lost = new Error('wrong last sequence: 4');
    await assert.rejects(outlastFailover(async () => { throw lost; }, { idempotent: true }), lost);
    assert.equal(leaderless(timeout), false);
    assert.equal(leaderless(lost), false);
  });
});
