// The scaling policy (autoscaler/policy.ts) with plain numbers: factor, threshold and stickiness of the
// scale-up and scale-down details, bounds, scale to zero after the idle window, custom vs platform policy,
// and how a version's count is spread over its GPU specifications.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { GpuSpecification } from '../src/control/deployments/schema.ts';
import { decide, decideStreaming, platformPolicy, policyFor, spread, type Inputs, type Policy, type Sample } from '../src/autoscaler/policy.ts';

const STEP = 1000;
const NOW = 1_000_000;
const policy = (up: Partial<Policy['up']> = {}, down: Partial<Policy['down']> = {}): Policy => ({
  source: 'CUSTOM', up: { factor: 2, threshold: 50, ...up }, down: { factor: 0.5, threshold: 25, ...down }, spare: 0,
});
/** `demands` one per second, the last one now. */
const samples = (demands: number[], instances = 0): Sample[] =>
  demands.map((demand, index) => ({ at: NOW - (demands.length - 1 - index) * STEP, demand, instances }));
const inputs = (over: Partial<Inputs>): Inputs => ({
  now: NOW, min: 1, max: 4, current: 1, concurrency: 1, samples: samples([0]), idleMs: 300_000, stepMs: STEP, ...over,
});
const spec = (id: string, over: Partial<GpuSpecification> = {}): GpuSpecification => ({
  gpuSpecificationId: id, gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 0, maxInstances: 4, maxRequestConcurrency: 1, ...over,
});

describe('scaling policy', () => {
  test('a burst: enough instances in one step to bring utilization to the threshold, bounded by maxInstances', () => {
    const outcome = decide(policy(), inputs({ samples: samples([8]) }));
    assert.equal(outcome.utilization, 800);
    assert.equal(outcome.desired, 4);
    assert.equal(outcome.reason, 'scale-up');
    assert.match(outcome.detail, /bounded to 4 by maxInstances 4/);
    const atMax = decide(policy(), inputs({ current: 4, samples: samples([8]) }));
    assert.deepEqual([atMax.desired, atMax.reason], [4, 'hold']);
  });

  test('scale-up is at least current × factor; utilization counts queued work against maxRequestConcurrency', () => {
    // 13 requests on 4 instances of concurrency 4: 81 % > 75 %; the load alone needs 5, the factor asks 8.
    const outcome = decide(policy({ factor: 2, threshold: 75 }), inputs({ current: 4, max: 20, concurrency: 4, samples: samples([13]) }));
    assert.equal(Math.round(outcome.utilization!), 81);
    assert.equal(outcome.desired, 8);
    // Within the thresholds nothing moves.
    assert.equal(decide(policy(), inputs({ current: 4, max: 20, concurrency: 4, samples: samples([6]) })).reason, 'hold');
  });

  test('scale-up stickiness: only once utilization stayed above the threshold long enough within the window', () => {
    const sticky = policy({ stickiness: { sizeMs: 10_000, thresholdMs: 3000 } });
    const brief = decide(sticky, inputs({ samples: samples([0, 0, 0, 3, 3]) }));
    assert.deepEqual([brief.desired, brief.reason], [1, 'wait-stickiness']);
    const long = decide(sticky, inputs({ samples: samples([0, 3, 3, 3, 3]) }));
    assert.deepEqual([long.desired, long.reason], [4, 'scale-up']);
    // Above the threshold earlier in the window but not now: no scale-up.
    assert.notEqual(decide(sticky, inputs({ samples: samples([3, 3, 3, 3, 0]) })).reason, 'scale-up');
  });

  test('scale-down by the factor, at least one fewer, never below minInstances or what the load needs', () => {
    assert.equal(decide(policy(), inputs({ current: 8, max: 8, samples: samples([0]) })).desired, 4);
    assert.equal(decide(policy(), inputs({ current: 2, samples: samples([0]) })).desired, 1);
    assert.equal(decide(policy({}, { factor: 0.9 }), inputs({ current: 4, samples: samples([0]) })).desired, 3);
    const floor = decide(policy(), inputs({ current: 4, min: 2, samples: samples([0]) }));
    assert.deepEqual([floor.desired, floor.reason], [2, 'scale-down']);
    // 2 in flight on 10 instances is 20 %: halving to 5 keeps it under the scale-up threshold (needs 4).
    assert.equal(decide(policy({ threshold: 50 }), inputs({ current: 10, max: 10, samples: samples([2]) })).desired, 5);
    const atMin = decide(policy(), inputs({ current: 1, samples: samples([0]) }));
    assert.deepEqual([atMin.desired, atMin.reason], [1, 'hold']);
  });

  test('scale-down stickiness: quiet for the stickiness threshold within the window first', () => {
    const sticky = policy({}, { stickiness: { sizeMs: 5000, thresholdMs: 2000 } });
    const early = decide(sticky, inputs({ current: 4, samples: samples([4, 4, 4, 0, 0]) }));
    assert.deepEqual([early.desired, early.reason], [4, 'wait-stickiness']);
    const quiet = decide(sticky, inputs({ current: 4, samples: samples([4, 4, 0, 0, 0]) }));
    assert.deepEqual([quiet.desired, quiet.reason], [2, 'scale-down']);
  });

  test('minInstances 0: one instance stays warm until no invocation for the idle window, then zero', () => {
    const warm = decide(policy(), inputs({ min: 0, current: 1, lastInvocationAt: NOW - 10_000, idleMs: 60_000 }));
    assert.deepEqual([warm.desired, warm.reason], [1, 'keep-warm']);
    const idle = decide(policy(), inputs({ min: 0, current: 1, lastInvocationAt: NOW - 60_000, idleMs: 60_000 }));
    assert.deepEqual([idle.desired, idle.reason], [0, 'scale-to-zero']);
    const busy = decide(policy(), inputs({ min: 0, current: 1, lastInvocationAt: NOW - 60_000, idleMs: 60_000, samples: samples([1]) }));
    assert.ok(busy.desired >= 1, 'work in flight is never scaled to zero');
    // A request that ran longer than the window: the window counts from when it was last in flight.
    const longRun = decide(policy(), inputs({ min: 0, current: 1, lastInvocationAt: NOW - 60_000, idleMs: 60_000, samples: samples([1, 1, 0]) }));
    assert.deepEqual([longRun.desired, longRun.reason], [1, 'keep-warm']);
    const withMinimum = decide(policy(), inputs({ min: 1, current: 1, lastInvocationAt: NOW - 600_000, idleMs: 60_000 }));
    assert.equal(withMinimum.desired, 1);
    // Work waiting on zero instances: unbounded utilization, scale up.
    const waking = decide(policy(), inputs({ min: 0, current: 0, samples: samples([2]) }));
    assert.equal(waking.utilization, Number.POSITIVE_INFINITY);
    assert.deepEqual([waking.desired, waking.reason], [4, 'scale-up']);
  });

  test('bounds win: a count above a lowered maxInstances comes down; no samples holds', () => {
    assert.equal(decide(policy(), inputs({ current: 6, max: 3, samples: samples([1]) })).desired, 3);
    const blind = decide(policy(), inputs({ current: 2, samples: [] }));
    assert.deepEqual([blind.desired, blind.reason, blind.utilization], [2, 'no-metrics', null]);
  });

  test('policy: CUSTOM_CONFIGURATION applies, missing details fall back to the platform; PLATFORM_CONFIGURATION ignores a stored custom one', () => {
    const platform = platformPolicy();
    assert.deepEqual([platform.up.factor, platform.up.threshold, platform.down.factor, platform.down.threshold], [2, 75, 0.5, 25]);
    const custom = policyFor([spec('a', {
      autoscalingConfigurationPolicy: 'CUSTOM_CONFIGURATION',
      autoscalingConfiguration: { scaleUpDetails: { factor: 1.5, threshold: 60, stickiness: { size: 'PT10M', threshold: 'PT3M' } } },
    })], platform);
    assert.equal(custom.source, 'CUSTOM');
    assert.deepEqual(custom.up, { factor: 1.5, threshold: 60, stickiness: { sizeMs: 600_000, thresholdMs: 180_000 } });
    assert.deepEqual(custom.down, platform.down);
    const reverted = policyFor([spec('a', {
      autoscalingConfigurationPolicy: 'PLATFORM_CONFIGURATION', autoscalingConfiguration: { scaleUpDetails: { factor: 3, threshold: 10 } },
    })], platform);
    assert.equal(reverted.source, 'PLATFORM');
    const overridden = platformPolicy({ scaleDownDetails: { factor: 0.75, threshold: 10 } });
    assert.deepEqual([overridden.down.factor, overridden.down.threshold, overridden.up.threshold], [0.75, 10, 75]);
  });

  test('a version count is spread over its specifications: each its minimum, the rest by preferredOrder up to each maximum', () => {
    const specs = [spec('late', { preferredOrder: 2, minInstances: 1, maxInstances: 3 }), spec('early', { preferredOrder: 1, maxInstances: 2 })];
    assert.deepEqual(Object.fromEntries(spread(1, specs)), { early: 0, late: 1 });
    assert.deepEqual(Object.fromEntries(spread(3, specs)), { early: 2, late: 1 });
    assert.deepEqual(Object.fromEntries(spread(5, specs)), { early: 2, late: 3 });
  });

  test('STREAMING functions scale on sessions: one instance per session or person waiting, plus spare, within the bounds', () => {
    const streaming = (spare: number, demand: number, over: Partial<Inputs> = {}) =>
      decideStreaming({ ...policy(), spare }, { min: 1, max: 4, current: 2, samples: samples([demand]), ...over });
    assert.deepEqual([streaming(1, 2).desired, streaming(1, 2).reason], [3, 'scale-up']);
    assert.match(streaming(1, 2).detail, /2 in a session or waiting \+ 1 spare = 3/);
    assert.deepEqual([streaming(1, 6).desired, streaming(1, 6).reason], [4, 'scale-up'], 'bounded by maxInstances');
    assert.match(streaming(1, 6).detail, /bounded to 4 by maxInstances 4/);
    assert.deepEqual([streaming(1, 0).desired, streaming(1, 0).reason], [1, 'scale-down'], 'nobody: just the spare');
    assert.deepEqual([streaming(0, 0, { min: 0 }).desired, streaming(2, 0, { min: 0, current: 2 }).reason], [0, 'hold']);
    assert.equal(decideStreaming({ ...policy(), spare: 1 }, { min: 1, max: 4, current: 1, samples: [] }).desired, 1, 'no samples: the spare alone');
    const summed = policyFor([spec('a', { autoscalingConfiguration: { spare: 1 } }), spec('b', { autoscalingConfiguration: { spare: 2 } })], platformPolicy());
    assert.equal(summed.spare, 3, 'each specification keeps its spare');
    assert.equal(policyFor([spec('a')], platformPolicy({ spare: 1 })).spare, 1, 'the platform default');
  });
});
