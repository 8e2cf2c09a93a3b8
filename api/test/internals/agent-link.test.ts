// The agent link's one schema per message (compute/protocol.ts), as both ends decode frames.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { agentMessageSchema, controlMessageSchema, decodeMessage } from '../../src/compute/protocol.ts';

const report = { instanceId: 'i1', functionVersionId: 'v1', state: 'RUNNING', restarts: 0, updatedAt: '2026-01-01T00:00:00Z', endpoint: { host: '10.0.0.2', ports: { inference: 8000, health: 8000 } } };

test('a frame decodes into its message, or says which field is wrong', () => {
  assert.deepEqual(decodeMessage(agentMessageSchema, JSON.stringify({ type: 'instance', report })), { message: { type: 'instance', report } });
  assert.match((decodeMessage(agentMessageSchema, JSON.stringify({ type: 'instance', report: { ...report, state: 'ASLEEP' } })) as { error: string }).error, /^report\.state:/);
  assert.deepEqual(decodeMessage(agentMessageSchema, '{"type":"staged","requestId":"r1","error":"the download answered 404"}'),
    { message: { type: 'staged', requestId: 'r1', error: 'the download answered 404' } });
  assert.deepEqual(decodeMessage(controlMessageSchema, 'not json'), { error: 'not JSON' });
  assert.match((decodeMessage(controlMessageSchema, '{"type":"unheard-of"}') as { error: string }).error, /^type:/);
  assert.match((decodeMessage(controlMessageSchema, '{"type":"desired","instances":[{"instanceId":7}]}') as { error: string }).error, /^instances\.0\./);
});

test('the control plane\'s stage message carries each asset\'s signed path', () => {
  const stage = { type: 'stage', requestId: 'r1', instanceId: 'i1', assets: [{ assetId: 'a1', path: '/v2/svc/assets/a1/content?expires=1&signature=x' }] };
  assert.deepEqual(decodeMessage(controlMessageSchema, JSON.stringify(stage)), { message: stage });
  assert.ok('error' in decodeMessage(controlMessageSchema, JSON.stringify({ ...stage, assets: [{ assetId: 'a1' }] })));
});
