// The version resolver (invocation/resolver.ts): which version takes a request, and why not.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { choose, takesRequests, takesSessions, type KnownVersion } from '../../src/invocation/resolver.ts';

const version = (versionId: string, status: string): KnownVersion => ({
  status, streaming: false, target: { ncaId: 'a', functionId: 'f', versionId, functionName: 'fn', inferenceUrl: '/' },
});
const refusal = (versions: KnownVersion[], versionId?: string) => {
  try {
    choose(versions, 'f', versionId);
  } catch (error) {
    const { status, message, headers } = error as { status: number; message: string; headers: Record<string, string> };
    return { status, message, retryAfter: headers['retry-after'] };
  }
  throw new Error('expected a refusal');
};

test('ACTIVE, DEPLOYING and DEGRADING take requests; the others do not', () => {
  assert.deepEqual(['ACTIVE', 'DEPLOYING', 'DEGRADING', 'DEGRADED', 'ERROR', 'INACTIVE'].map(takesRequests), [true, true, true, false, false, false]);
});

test('a streaming line also takes sign-ins while DEGRADED (between sessions), not in ERROR or INACTIVE', () => {
  assert.deepEqual(['ACTIVE', 'DEPLOYING', 'DEGRADING', 'DEGRADED', 'ERROR', 'INACTIVE'].map(takesSessions), [true, true, true, true, false, false]);
});

test('the version named, or one that takes requests', () => {
  const versions = [version('v1', 'INACTIVE'), version('v2', 'ACTIVE'), version('v3', 'DEGRADED')];
  assert.equal(choose(versions, 'f', 'v2').target.versionId, 'v2');
  for (let i = 0; i < 20; i++) assert.equal(choose(versions, 'f').target.versionId, 'v2');
  const both = [version('v1', 'ACTIVE'), version('v2', 'DEPLOYING')];
  const seen = new Set(Array.from({ length: 200 }, () => choose(both, 'f').target.versionId));
  assert.deepEqual([...seen].sort(), ['v1', 'v2'], 'spread over every version that takes requests');
});

test('unknown 404; INACTIVE 404 not deployed; DEGRADED or ERROR 503 with Retry-After', () => {
  assert.deepEqual(refusal([], undefined), { status: 404, message: "Function id 'f': not found", retryAfter: undefined });
  assert.deepEqual(refusal([version('v1', 'ACTIVE')], 'v9'), { status: 404, message: "Function id 'f', version 'v9': not found", retryAfter: undefined });
  assert.deepEqual(refusal([version('v1', 'INACTIVE')], 'v1'), { status: 404, message: "Function id 'f', version 'v1': not deployed", retryAfter: undefined });
  assert.deepEqual(refusal([version('v1', 'DEGRADED')]), { status: 503, message: "Function id 'f' is DEGRADED and takes no requests now", retryAfter: '5' });
  assert.equal(refusal([version('v1', 'ERROR')], 'v1').status, 503);
});
