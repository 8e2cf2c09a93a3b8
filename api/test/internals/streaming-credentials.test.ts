import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ReadyInstance } from '../../src/control/instances/service.ts';
import { credentialsFor } from '../../src/streaming/container.ts';

const at = (host: string): ReadyInstance => ({
  instanceId: 'i', versionId: 'v', clusterId: 'c', endpoint: { host, ports: { inference: 1, health: 1, control: 2 } },
  maxRequestConcurrency: 1, gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', backend: 'svc-local', region: 'local',
});
const credentials = (stunIp: string) => ({ stunIp, stunPort: 3478, username: 'u', password: 'p' });

test('a STUN/TURN server on the platform\'s loopback is handed only to instances on that loopback', () => {
  assert.deepEqual(credentialsFor(at('127.0.0.1'), credentials('127.0.0.1')), credentials('127.0.0.1'));
  assert.equal(credentialsFor(at('10.199.0.2'), credentials('127.0.0.1')), undefined, 'a sandbox has a loopback of its own');
  const container = { ...at('127.0.0.1'), endpoint: { ...at('127.0.0.1').endpoint, ownLoopback: true } };
  assert.equal(credentialsFor(container, credentials('127.0.0.1')), undefined, 'a container published on the loopback has a loopback of its own');
  assert.deepEqual(credentialsFor(container, credentials('203.0.113.7')), credentials('203.0.113.7'));
  assert.deepEqual(credentialsFor(at('10.199.0.2'), credentials('203.0.113.7')), credentials('203.0.113.7'));
  assert.equal(credentialsFor(at('10.199.0.2'), undefined), undefined);
});
