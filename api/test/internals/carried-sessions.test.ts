// CarriedSessions (streaming/carried-sessions.ts) on a real store: a started session is kept, the next
// broker reads it and carries it on once its instance is reported ready (of its version only), a row that
// does not decode is left out, and what is not taken within the window is forgotten.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { PassThrough } from 'node:stream';
import type { ReadyInstance } from '../../src/control/instances/service.ts';
import { openDatabase } from '../../src/database.ts';
import { createLogger } from '../../src/logger.ts';
import { CarriedSessions } from '../../src/streaming/carried-sessions.ts';
import { Session } from '../../src/streaming/session.ts';
import { createSessionRecords, type StreamingSessionsDatabase } from '../../src/streaming/session-records.ts';
import { createDatabase } from '../helpers/databases.ts';
import { until } from '../helpers/wait.ts';

const log = createLogger('silent');
const version = { versionId: 'v1', ncaId: 'owner', name: 'fn', inferenceUrl: '/sign_in' };
const instance: ReadyInstance = {
  instanceId: 'i1', versionId: 'v1', clusterId: 'c', endpoint: { host: '127.0.0.1', ports: { inference: 1, health: 1, control: 2 } },
  maxRequestConcurrency: 1, gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', backend: 'svc-local', region: 'local',
};
const database = await createDatabase('sqlite');
const store = await openDatabase({ dataDir: database.dataDir });
after(async () => {
  await store.close();
  await database.drop();
});

test('kept by one broker, carried on by the next on its instance; a row that does not decode is left out; the rest forgotten after the window', async () => {
  const records = createSessionRecords(store.db.withTables<StreamingSessionsDatabase>(), log);
  const session = new Session({ id: 's1', ncaId: 'caller', subject: { kind: 'api-key', credentialId: 'k1', ownerId: 'me' }, functionId: 'f', candidates: [version] }, () => {});
  session.grant(version, instance, 10_000);
  session.connect(new PassThrough());
  new CarriedSessions(records, log).keep(session);
  await store.db.withTables<StreamingSessionsDatabase>().insertInto('streaming_sessions').values({ session_id: 'broken', record: '{"id":' }).execute();
  await until('the session kept', async () => (await records.list()).length === 1);

  const next = new CarriedSessions(records, log);
  await next.load(() => false, 60_000);
  assert.equal(next.waiting('s1', 'caller'), true);
  assert.equal(next.waiting('s1', 'another-account'), false);
  assert.equal(next.take('i1', 'v2'), undefined, 'another version\'s instance of that id carries nothing');
  const record = next.take('i1', 'v1');
  assert.deepEqual({ ...record, joinedAt: 0, grantedAt: 0, connectedAt: 0 }, {
    id: 's1', ncaId: 'caller', subject: { kind: 'api-key', credentialId: 'k1', ownerId: 'me' }, functionId: 'f', version, instanceId: 'i1',
    joinedAt: 0, grantedAt: 0, connectedAt: 0,
  });
  assert.equal(next.waiting('s1', 'caller'), false, 'taken');

  const late = new CarriedSessions(records, log);
  await late.load(() => false, 50);
  await until('the unclaimed session forgotten', async () => (await records.list()).length === 0);
  assert.equal(late.waiting('s1', 'caller'), false, 'not taken within the window: over, and forgotten');
});
