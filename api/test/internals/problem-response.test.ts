// asProblem: what a caller is told of an error thrown while serving. Express's own request errors (they
// say they may be shown) are the caller's fault; another library's error that carries a status (a NATS
// time-out carries 408) is the platform's, hidden behind a 500.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { asProblem } from '../../src/http/problem-response.ts';
import { createLogger } from '../../src/logger.ts';

const log = createLogger('silent');

test('an express request error is a 400, a status from elsewhere is a 500', () => {
  const express = Object.assign(new Error('Failed to decode param'), { status: 400, expose: true });
  assert.equal(asProblem(express, log, 'r1').status, 400);
  const nats = Object.assign(new Error('Request Timeout'), { status: 408 });
  const hidden = asProblem(nats, log, 'r2');
  assert.equal(hidden.status, 500);
  assert.doesNotMatch(hidden.message, /Timeout/);
});
