// Function status transitions (control/instances/status.ts): what a version's instances make of its
// status, round after round, from its first deployment to its removal and a redeployment.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { InstanceRow } from '../../src/control/instances/repo.ts';
import { CRASH_LOOP_RESTARTS, nextStatus, statusFacts, type StatusFacts } from '../../src/control/instances/status.ts';
import type { GpuSpecification } from '../../src/control/deployments/schema.ts';
import type { FunctionStatus } from '../../src/control/functions/schema.ts';

const spec = (minInstances: number): GpuSpecification => ({
  gpuSpecificationId: `s${minInstances}`, gpu: 'L40', instanceType: 'x', minInstances, maxInstances: 4, maxRequestConcurrency: 1,
});
const instance = (state: string, restarts = 0): InstanceRow => ({
  instance_id: `i-${state}-${restarts}`, nca_id: 'a', function_id: 'f', version_id: 'v', cluster_id: 'c', gpu_spec_id: 's', gpu: 'L40',
  instance_type: 'x', state, desired: 1, endpoint: null, restarts, message: null, node_id: null, created_at: '', updated_at: '',
});
const facts = (ready: number, options: Partial<StatusFacts> = {}): StatusFacts => ({ minimum: 2, target: 2, ready, failing: false, ...options });

/** Statuses a version passes through when the rounds see `steps` in turn. */
function walk(from: FunctionStatus, steps: StatusFacts[]): FunctionStatus[] {
  const seen: FunctionStatus[] = [];
  let status = from;
  for (const step of steps) seen.push(status = nextStatus(status, step));
  return seen;
}

test('a deployment: DEPLOYING until the minimum is ready, then ACTIVE; DEGRADING below it, DEGRADED at none, ACTIVE again', () => {
  assert.deepEqual(walk('INACTIVE', [facts(0), facts(1), facts(2), facts(1), facts(0), facts(1), facts(2)]),
    ['DEPLOYING', 'DEPLOYING', 'ACTIVE', 'DEGRADING', 'DEGRADED', 'DEGRADING', 'ACTIVE']);
});

test('ERROR when every wanted instance fails, from any status; left for DEGRADING once one is ready, then ACTIVE', () => {
  for (const from of ['INACTIVE', 'DEPLOYING', 'ACTIVE', 'DEGRADING', 'DEGRADED'] as const) {
    assert.equal(nextStatus(from, facts(0, { failing: true })), 'ERROR', from);
  }
  assert.deepEqual(walk('ERROR', [facts(0), facts(1), facts(2)]), ['ERROR', 'DEGRADING', 'ACTIVE']);
});

test('minInstances 0: scaled to zero, or waking for a request, the version stays ACTIVE and takes requests', () => {
  const idle = facts(0, { minimum: 0, target: 0 });
  const waking = facts(0, { minimum: 0, target: 1 });
  assert.deepEqual(walk('INACTIVE', [idle, waking, facts(1, { minimum: 0, target: 1 }), idle]), ['ACTIVE', 'ACTIVE', 'ACTIVE', 'ACTIVE']);
});

test('DEPLOYING waits for a ready instance when one is wanted; with no minimum and nothing wanted it is ACTIVE at once', () => {
  assert.equal(nextStatus('DEPLOYING', facts(0, { minimum: 1, target: 1 })), 'DEPLOYING');
  assert.equal(nextStatus('DEPLOYING', facts(0, { minimum: 0, target: 0 })), 'ACTIVE');
});

test('placement never makes a version INACTIVE: only removing its deployment does, and a redeployment starts over from there', () => {
  const statuses = ['INACTIVE', 'DEPLOYING', 'ACTIVE', 'DEGRADING', 'DEGRADED', 'ERROR'] as const;
  const cases = [facts(0), facts(1), facts(2), facts(0, { failing: true }), facts(0, { minimum: 0, target: 0 })];
  for (const from of statuses) for (const step of cases) assert.notEqual(nextStatus(from, step), 'INACTIVE', `${from} ${JSON.stringify(step)}`);
  assert.deepEqual(walk('INACTIVE', [facts(0), facts(2)]), ['DEPLOYING', 'ACTIVE']);
});

test('statusFacts: minimum is the specifications\' sum; failing means every held instance failed or crash-loops and none is ready', () => {
  assert.deepEqual(statusFacts([spec(1), spec(2)], 3, [instance('RUNNING'), instance('STARTING')]), { minimum: 3, target: 3, ready: 1, failing: false });
  assert.equal(statusFacts([spec(1)], 1, [instance('FAILED'), instance('RESTARTING', CRASH_LOOP_RESTARTS)]).failing, true);
  assert.equal(statusFacts([spec(1)], 1, [instance('FAILED'), instance('RESTARTING', CRASH_LOOP_RESTARTS - 1)]).failing, false, 'still restarting');
  assert.equal(statusFacts([spec(1)], 1, [instance('STARTING', CRASH_LOOP_RESTARTS)]).failing, false, 'starting again after restarts');
  assert.equal(statusFacts([spec(1)], 1, [instance('FAILED'), instance('RUNNING')]).failing, false, 'one is ready');
  assert.equal(statusFacts([spec(0)], 0, []).failing, false, 'nothing held');
});
