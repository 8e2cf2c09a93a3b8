// Header filtering (invocation/headers.ts, wire-reference 5): what reaches the container and what comes back.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ReadyInstance } from '../../src/control/instances/service.ts';
import { containerHeaders, forwardedRequestHeaders, forwardedResponseHeaders, svcStatus } from '../../src/invocation/headers.ts';
import { Invocation } from '../../src/invocation/invocation.ts';

test('the client headers minus hop-by-hop ones, the bearer and any SVC-*; JSON by default', () => {
  const forwarded = forwardedRequestHeaders({
    authorization: 'Bearer secret', connection: 'keep-alive', host: 'api.localhost', 'content-length': '12', 'transfer-encoding': 'chunked',
    'svc-sub': 'forged', 'svc-ncaid': 'forged', 'x-custom': 'kept', expect: '100-continue', accept: 'text/plain', 'x-list': ['a', 'b'] as unknown as string,
  });
  assert.deepEqual(forwarded, { 'x-custom': 'kept', accept: 'text/plain', 'x-list': 'a, b', 'content-type': 'application/json' });
  assert.equal(forwardedRequestHeaders({ 'content-type': 'text/csv' })['content-type'], 'text/csv');
  assert.deepEqual(forwardedRequestHeaders({ accept: '*/*' }, true), { accept: '*/*' }, 'a host-routed request gets no type it did not have');
});

test('response headers minus hop-by-hop ones and the container\'s SVC-*', () => {
  assert.deepEqual(forwardedResponseHeaders({
    'content-type': 'application/json', 'set-cookie': ['a=1', 'b=2'], connection: 'close', 'transfer-encoding': 'chunked', 'svc-status': 'x',
  }), { 'content-type': 'application/json', 'set-cookie': ['a=1', 'b=2'] });
});

test('the container gets the platform\'s SVC-* headers after the client\'s', () => {
  const target = { ncaId: 'acct', functionId: 'f1', versionId: 'v1', functionName: 'echo', inferenceUrl: '/echo' };
  const invocation = new Invocation('req-1', target, 'owner', { headers: { 'x-custom': 'kept' }, body: Buffer.alloc(0), sse: false });
  const instance = {
    instanceId: 'i1', versionId: 'v1', clusterId: 'c1', maxRequestConcurrency: 1, gpu: 'L40', instanceType: 'gl40_1.br20_2xlarge', backend: 'my-cluster', region: 'eu',
    endpoint: { host: '10.0.0.2', ports: { inference: 8000 }, outputDir: '/data/out' },
  } as ReadyInstance;
  const lines = containerHeaders(invocation, instance, 1024);
  assert.ok(lines.endsWith('\r\n'));
  const headers = Object.fromEntries(lines.slice(0, -2).split('\r\n').map((line) => line.split(': ')));
  assert.deepEqual(headers, {
    'x-custom': 'kept', 'svc-reqid': 'req-1', 'svc-sub': 'owner', 'svc-ncaid': 'acct', 'svc-function-name': 'echo', 'svc-function-id': 'f1',
    'svc-function-version-id': 'v1', 'svc-asset-dir': '/data/out/req-1/assets', 'svc-large-output-dir': '/data/out/req-1',
    'svc-max-response-size-bytes': '1024', 'svc-backend': 'my-cluster', 'svc-instancetype': 'gl40_1.br20_2xlarge', 'svc-region': 'eu', 'svc-env': 'svc',
  });
});

test('SVC-STATUS: 202 in progress, 2xx/3xx fulfilled, the rest errored', () => {
  assert.deepEqual([202, 200, 302, 400, 502].map(svcStatus), ['in-progress', 'fulfilled', 'fulfilled', 'errored', 'errored']);
});

test('a value an admin or an agent chose cannot add a header line to the container request', () => {
  const target = { ncaId: 'acct', functionId: 'f1', versionId: 'v1', functionName: 'echo', inferenceUrl: '/echo' };
  const invocation = new Invocation('req-1', target, 'owner', { headers: {}, body: Buffer.alloc(0), sse: false });
  const instance = {
    instanceId: 'i1', versionId: 'v1', clusterId: 'c1', maxRequestConcurrency: 1, gpu: 'L40', instanceType: 't', backend: 'b', region: 'eu\r\nx-injected: 1',
    endpoint: { host: '10.0.0.2', ports: { inference: 8000 }, outputDir: '/out\nx-injected: 2' },
  } as ReadyInstance;
  const lines = containerHeaders(invocation, instance, 1024).slice(0, -2).split('\r\n');
  assert.ok(lines.every((line) => !line.startsWith('x-injected') && !line.includes('\n')), lines.join(' | '));
  assert.ok(lines.includes('svc-region: eu  x-injected: 1'));
});
