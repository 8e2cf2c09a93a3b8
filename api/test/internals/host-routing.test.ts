// Which function a host-routed request names (invocation/host-routing.ts, wire-reference 5).
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { test } from 'node:test';
import { functionRoutingOf } from '../../src/invocation/host-routing.ts';

const fn = '6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f';
const version = '00000000-0000-0000-0000-000000000001';
const routing = (host: string, headers: Record<string, string> = {}) =>
  functionRoutingOf({ headers: { host, ...headers } } as unknown as IncomingMessage, 'invocation.example.com');

test('<function>.invocation.<address> and <version>.<function>.invocation.<address>, with or without a port', () => {
  assert.deepEqual(routing(`${fn}.invocation.example.com`), { functionId: fn });
  assert.deepEqual(routing(`${fn.toUpperCase()}.INVOCATION.example.com:8443`), { functionId: fn });
  assert.deepEqual(routing(`${version}.${fn}.invocation.example.com`), { functionId: fn, functionVersionId: version });
});

test('function-id (and function-version-id) headers name the function on any of these hosts, ahead of the host', () => {
  assert.deepEqual(routing('invocation.example.com', { 'function-id': fn }), { functionId: fn });
  assert.deepEqual(routing(`${version}.invocation.example.com`, { 'function-id': fn, 'function-version-id': version }), { functionId: fn, functionVersionId: version });
  assert.deepEqual(routing('invocation.example.com', { 'function-id': fn, 'function-version-id': 'latest' }), { functionId: fn }, 'a version that is no id is ignored');
});

test('anything else names no function: served by path', () => {
  for (const host of ['invocation.example.com', `x${fn}.invocation.example.com`, `a.${version}.${fn}.invocation.example.com`, `${fn}.invocation.example.org`, `${fn}.example.com`]) {
    assert.equal(routing(host), undefined, host);
  }
  assert.equal(routing('invocation.example.com', { 'function-id': 'not-an-id' }), undefined);
});
