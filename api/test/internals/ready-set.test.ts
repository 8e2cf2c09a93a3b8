// ReadySet (invocation/ready-set.ts) on a NATS server of its own: placement's set is published signed and
// only when it changed; an entry not signed with the installation's key is ignored (the last good set
// stays); an instance benched here is left out until placement announces the set again.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { ReadyInstance } from '../../src/control/instances/service.ts';
import { natsNames } from '../../src/invocation/nats.ts';
import { openBucket } from '../../src/invocation/nats.ts';
import { ReadySet } from '../../src/invocation/ready-set.ts';
import { createReplicaSigner } from '../../src/invocation/replica-signing.ts';
import { createLogger } from '../../src/logger.ts';
import { natsServerAvailable, startNats, type TestNats } from '../helpers/nats.ts';
import { until } from '../helpers/wait.ts';

describe('ReadySet', { skip: !natsServerAvailable() }, () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let kv: KV;
  const signer = createReplicaSigner(randomBytes(32).toString('base64url'));
  const names = natsNames('svc');
  before(async () => {
    nats = await startNats();
    nc = await nats.connect();
    kv = (await openBucket(nc, await jetstreamManager(nc), names.bucket('ready'), 1)).kv;
  });
  after(async () => {
    await nc?.close();
    await nats?.stop();
  });

  const instance = (versionId: string, instanceId: string = randomUUID()): ReadyInstance => ({
    instanceId, versionId, clusterId: 'c1', maxRequestConcurrency: 2, gpu: 'L40', instanceType: 't', backend: 'b', region: 'r',
    endpoint: { host: '127.0.0.1', ports: { inference: 1, health: 1 } },
  });

  test('published signed and only when it changed; what the watch reads opens to the same set', async () => {
    const set = new ReadySet(kv, signer, createLogger('silent'), names);
    const versionId = randomUUID();
    const instances = [instance(versionId)];
    set.publish(versionId, instances);
    const first = await until('the set to be written', async () => kv.get(versionId).then((entry) => entry ?? undefined));
    assert.deepEqual(set.opened(versionId, first.string()), instances);
    set.publish(versionId, [{ ...instances[0] }]);
    set.publish(versionId, [instance(versionId, instances[0].instanceId)]);
    const grown = [...instances, instance(versionId)];
    set.publish(versionId, grown);
    const second = await until('the changed set to be written', async () => kv.get(versionId).then((entry) => (entry && entry.revision > first.revision ? entry : undefined)));
    assert.equal(second.revision, first.revision + 1, 'the unchanged set was not written again');
    assert.deepEqual(set.opened(versionId, second.string()), grown);
  });

  test('an entry not signed with the installation\'s key is ignored; a benched instance is left out until announced again', () => {
    const lines: string[] = [];
    const set = new ReadySet(kv, signer, createLogger('warn', { write: (line: string) => void lines.push(line) }), names);
    const versionId = randomUUID();
    const [a, b] = [instance(versionId), instance(versionId)];
    const forged = createReplicaSigner(randomBytes(32).toString('base64url')).sign(`ready ${versionId}`, [a]);
    assert.equal(set.opened(versionId, forged), undefined);
    assert.match(JSON.parse(lines[0]).msg, /not signed by placement; ignored/);
    assert.equal(set.opened(versionId, signer.sign(`ready ${versionId}`, [{ instanceId: a.instanceId }])), undefined, 'signed but not a set');
    set.set(versionId, [a, b]);
    set.bench(a.instanceId);
    assert.deepEqual(set.usable(versionId), [b]);
    set.set(versionId, [a, b]);
    assert.deepEqual(set.usable(versionId), [a, b], 'announced again: it takes requests again');
    set.forget(versionId);
    assert.deepEqual(set.usable(versionId), []);
  });
});
