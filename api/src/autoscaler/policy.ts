// The scaling policy: pure functions from a version's recent load to its desired instance count. No I/O,
// no clock of its own, so every rule is testable with plain numbers.
//
// Utilization = 100 × (in-flight + queued) / (instances × maxRequestConcurrency): a saturated version reads
// above 100 %, so one round can size it for a burst. Scale up when utilization is above the scale-up
// threshold now (and, with stickiness, for long enough within the window): to at least current × factor
// and enough instances to bring utilization down to the threshold. Scale down when below the scale-down
// threshold likewise: to current × factor (at least one fewer), never below what the load needs. Zero
// only with minInstances 0 and no invocation for the idle window. Always within [min, max].
import { parseDuration } from '../duration.ts';
import type { GpuSpecification } from '../control/deployments/schema.ts';
import type { z } from 'zod';
import type { autoscalingConfigurationSchema } from '../control/deployments/schema.ts';

export type AutoscalingConfiguration = z.infer<typeof autoscalingConfigurationSchema>;

export interface Stickiness {
  sizeMs: number;
  thresholdMs: number;
}

export interface ScalingDetails {
  factor: number;
  /** Utilization percent. */
  threshold: number;
  stickiness?: Stickiness;
}

export interface Policy {
  source: 'PLATFORM' | 'CUSTOM';
  up: ScalingDetails;
  down: ScalingDetails;
  /** STREAMING functions: ready instances kept beyond the busy ones. */
  spare: number;
}

/** The platform policy (PLATFORM_CONFIGURATION) unless settings override it; see the autoscaler README. */
export const PLATFORM_DEFAULTS: Omit<Policy, 'source'> = {
  up: { factor: 2, threshold: 75 },
  down: { factor: 0.5, threshold: 25, stickiness: { sizeMs: 300_000, thresholdMs: 180_000 } },
  spare: 0,
};

function details(given: NonNullable<AutoscalingConfiguration['scaleUpDetails']> | undefined, fallback: ScalingDetails): ScalingDetails {
  if (!given) return fallback;
  const size = given.stickiness ? parseDuration(given.stickiness.size) : undefined;
  const threshold = given.stickiness ? parseDuration(given.stickiness.threshold) : undefined;
  return {
    factor: given.factor, threshold: given.threshold,
    ...(size !== undefined && threshold !== undefined ? { stickiness: { sizeMs: size, thresholdMs: threshold } } : {}),
  };
}

/** The platform policy with a settings override applied field by field. */
export function platformPolicy(override?: AutoscalingConfiguration): Policy {
  return {
    source: 'PLATFORM',
    up: details(override?.scaleUpDetails, PLATFORM_DEFAULTS.up),
    down: details(override?.scaleDownDetails, PLATFORM_DEFAULTS.down),
    spare: override?.spare ?? PLATFORM_DEFAULTS.spare,
  };
}

/** GPU specifications in the order instances are given to them: preferredOrder, then as declared. */
export function orderSpecs(specs: GpuSpecification[]): GpuSpecification[] {
  return specs.map((spec, index) => ({ spec, index }))
    .sort((a, b) => (a.spec.preferredOrder ?? 100) - (b.spec.preferredOrder ?? 100) || a.index - b.index)
    .map(({ spec }) => spec);
}

/**
 * A version's policy: the first specification (in order) with a custom configuration, else the platform's.
 * The decision is per version (as the reference's), so its specifications should agree.
 */
export function policyFor(specs: GpuSpecification[], platform: Policy): Policy {
  // Spare instances are per specification: a version keeps the sum of what its specifications ask for.
  const spares = specs.map((spec) => spec.autoscalingConfiguration?.spare).filter((spare) => spare !== undefined);
  const spare = spares.length ? spares.reduce((sum, count) => sum + count, 0) : platform.spare;
  for (const spec of orderSpecs(specs)) {
    const custom = spec.autoscalingConfigurationPolicy === 'CUSTOM_CONFIGURATION'
      || (spec.autoscalingConfigurationPolicy === undefined && spec.autoscalingConfiguration !== undefined);
    if (custom && spec.autoscalingConfiguration) {
      return {
        source: 'CUSTOM',
        up: details(spec.autoscalingConfiguration.scaleUpDetails, platform.up),
        down: details(spec.autoscalingConfiguration.scaleDownDetails, platform.down),
        spare,
      };
    }
  }
  return { ...platform, spare };
}

/** Spreads a version's total over its specifications: each its minimum, the rest in order up to each maximum. */
export function spread(total: number, specs: GpuSpecification[]): Map<string, number> {
  const out = new Map<string, number>();
  let rest = total - specs.reduce((sum, spec) => sum + spec.minInstances, 0);
  for (const spec of orderSpecs(specs)) {
    const extra = Math.max(0, Math.min(rest, spec.maxInstances - spec.minInstances));
    out.set(spec.gpuSpecificationId, spec.minInstances + extra);
    rest -= extra;
  }
  return out;
}

/** One look at a version's load: requests in flight plus waiting, and its instances (running or starting). */
export interface Sample {
  at: number;
  demand: number;
  instances: number;
}

export interface Inputs {
  now: number;
  min: number;
  max: number;
  /** Instances placement is holding now (the last decision, within bounds). */
  current: number;
  /** Requests one instance takes at once (maxRequestConcurrency). */
  concurrency: number;
  /** Oldest first; the last one is now. */
  samples: Sample[];
  /** Last invocation (ms since epoch), for scale to zero; undefined when none is known. */
  lastInvocationAt?: number;
  idleMs: number;
  /** Sampling interval: gaps longer than twice this count as no data. */
  stepMs: number;
}

export const reasons = ['hold', 'scale-up', 'scale-down', 'scale-to-zero', 'keep-warm', 'wait-stickiness', 'no-metrics', 'skipped'] as const;
export type Reason = (typeof reasons)[number];

export interface Outcome {
  desired: number;
  reason: Reason;
  detail: string;
  /** Percent; null without samples, Infinity for work waiting on zero instances. */
  utilization: number | null;
}

export function utilizationOf(sample: Sample, current: number, concurrency: number): number {
  const instances = sample.instances > 0 ? sample.instances : current;
  if (instances === 0) return sample.demand > 0 ? Number.POSITIVE_INFINITY : 0;
  return (100 * sample.demand) / (instances * concurrency);
}

/** True when `past` holds now and, with stickiness, for at least its threshold within its window. */
export function sustained(samples: Sample[], now: number, past: (sample: Sample) => boolean, stickiness: Stickiness | undefined, stepMs: number): boolean {
  const latest = samples[samples.length - 1];
  if (!latest || !past(latest)) return false;
  if (!stickiness || stickiness.thresholdMs === 0) return true;
  // An interval between two samples counts when both ends are past the threshold (the conservative
  // reading of point samples) and it lies within the window; gaps longer than two steps count as two.
  let pastMs = 0;
  for (let index = 1; index < samples.length; index++) {
    const previous = samples[index - 1];
    const sample = samples[index];
    if (previous.at < now - stickiness.sizeMs || !past(previous) || !past(sample)) continue;
    pastMs += Math.min(sample.at - previous.at, 2 * stepMs);
  }
  return pastMs >= stickiness.thresholdMs;
}

const percent = (value: number) => (Number.isFinite(value) ? `${Math.round(value)}%` : 'unbounded (work waiting, no instance)');

/**
 * When the version last had work: its last invocation, or a sample with requests in flight after it. The idle
 * window counts from the later, so a request that runs longer than the window is not followed by zero at once.
 */
function lastActiveAt({ lastInvocationAt, samples }: Inputs): number {
  const busy = samples.findLast((sample) => sample.demand > 0)?.at ?? Number.NEGATIVE_INFINITY;
  return Math.max(lastInvocationAt ?? Number.NEGATIVE_INFINITY, busy);
}

export function decide(policy: Policy, inputs: Inputs): Outcome {
  const { now, min, max, current, concurrency, samples } = inputs;
  const clamp = (count: number) => Math.min(max, Math.max(min, count));
  const latest = samples[samples.length - 1];
  if (!latest) return { desired: clamp(current), reason: 'no-metrics', detail: 'no load samples yet; holding', utilization: null };

  const utilization = utilizationOf(latest, current, concurrency);
  const util = (sample: Sample) => utilizationOf(sample, current, concurrency);
  // Instances that would bring the present load to the scale-up threshold.
  const forLoad = latest.demand > 0 ? Math.ceil((100 * latest.demand) / (concurrency * policy.up.threshold)) : 0;
  const bounded = (count: number, why: string) => {
    const desired = clamp(count);
    return desired === count ? why : `${why}; bounded to ${desired} by ${desired === max ? `maxInstances ${max}` : `minInstances ${min}`}`;
  };

  if (utilization > policy.up.threshold) {
    if (!sustained(samples, now, (sample) => util(sample) > policy.up.threshold, policy.up.stickiness, inputs.stepMs)) {
      return { desired: clamp(current), reason: 'wait-stickiness', detail: `utilization ${percent(utilization)} above ${policy.up.threshold}%, not yet for ${policy.up.stickiness!.thresholdMs / 1000}s of ${policy.up.stickiness!.sizeMs / 1000}s`, utilization };
    }
    const wanted = Math.max(current + 1, Math.ceil(current * policy.up.factor), forLoad);
    const desired = clamp(wanted);
    if (desired <= current) return { desired, reason: 'hold', detail: `utilization ${percent(utilization)} above ${policy.up.threshold}%, at maxInstances ${max}`, utilization };
    const why = `utilization ${percent(utilization)} above ${policy.up.threshold}% (${policy.source} policy): ${current} → ${wanted}`;
    return { desired, reason: 'scale-up', detail: bounded(wanted, why), utilization };
  }

  const idleFor = now - lastActiveAt(inputs);
  if (min === 0 && latest.demand === 0 && idleFor >= inputs.idleMs) {
    const since = Number.isFinite(idleFor) ? `${Math.round(idleFor / 1000)}s` : 'ever';
    return { desired: 0, reason: 'scale-to-zero', detail: `no invocation for ${since} (idle window ${inputs.idleMs / 1000}s)`, utilization };
  }

  if (utilization < policy.down.threshold) {
    // A version that may go to zero keeps one instance until its idle window has passed.
    const floor = Math.max(min, forLoad, min === 0 ? 1 : 0);
    if (current > floor) {
      if (!sustained(samples, now, (sample) => util(sample) < policy.down.threshold, policy.down.stickiness, inputs.stepMs)) {
        return { desired: clamp(current), reason: 'wait-stickiness', detail: `utilization ${percent(utilization)} below ${policy.down.threshold}%, not yet for ${policy.down.stickiness!.thresholdMs / 1000}s of ${policy.down.stickiness!.sizeMs / 1000}s`, utilization };
      }
      const wanted = Math.max(floor, Math.min(current - 1, Math.ceil(current * policy.down.factor)));
      return { desired: clamp(wanted), reason: 'scale-down', detail: `utilization ${percent(utilization)} below ${policy.down.threshold}% (${policy.source} policy): ${current} → ${wanted}`, utilization };
    }
    if (min === 0 && current > 0) {
      const since = Number.isFinite(idleFor) ? `idle for ${Math.round(idleFor / 1000)}s` : 'no invocation known';
      return { desired: clamp(current), reason: 'keep-warm', detail: `${since}; to zero after ${inputs.idleMs / 1000}s idle`, utilization };
    }
  }

  const where = utilization < policy.down.threshold ? `below ${policy.down.threshold}%, at minInstances ${min}` : `within ${policy.down.threshold}–${policy.up.threshold}%`;
  return { desired: clamp(current), reason: 'hold', detail: `utilization ${percent(utilization)} ${where}`, utilization };
}

/**
 * STREAMING functions scale on sessions, not utilization: every session and every person waiting holds
 * an instance (one session per container), and `spare` ready instances wait for the next arrivals.
 */
export function decideStreaming(policy: Policy, inputs: Pick<Inputs, 'min' | 'max' | 'current' | 'samples'>): Outcome {
  const { min, max, current } = inputs;
  const demand = inputs.samples.at(-1)?.demand ?? 0;
  const wanted = demand + policy.spare;
  const desired = Math.min(max, Math.max(min, wanted));
  const why = `${demand} in a session or waiting + ${policy.spare} spare = ${wanted}${desired === wanted ? '' : `; bounded to ${desired} by ${desired === max ? `maxInstances ${max}` : `minInstances ${min}`}`}`;
  const reason: Reason = desired > current ? 'scale-up' : desired < current ? 'scale-down' : 'hold';
  return { desired, reason, detail: why, utilization: current > 0 ? (100 * demand) / current : null };
}
