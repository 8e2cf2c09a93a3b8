// The autoscaler's two loops, on one timer so they never overlap:
// - discovery (every discoveryIntervalMs), under the store's discovery lock: the replica that takes (or
//   renews) it finds active function versions in the metrics source and keeps the active set in the store;
//   a crashed holder's lock expires after discovery_lock_duration_seconds and another replica takes over;
// - scaling (every scalingIntervalMs), on the lock holder only: a desired count per active version from its
//   load and policy, written through the deployment path (platform.ts). Versions not in a deployable status
//   are skipped once and not looked at again until their status changes.
// A failing metrics source or deployment path stops the round: no decision is taken on partial inputs.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { takesRequests } from '../invocation/resolver.ts';
import type { Logger } from '../logger.ts';
import type { AutoscalerMetrics } from './metrics.ts';
import type { DeployedVersion, DesiredEntry, ScalingPlatform } from './platform.ts';
import { decide, decideStreaming, platformPolicy, policyFor, reasons, spread, type Outcome, type Policy } from './policy.ts';
import type { GpuSpecification } from '../control/deployments/schema.ts';
import type { AutoscalerRepo, FunctionStateRow } from './repo.ts';
import type { AutoscalerSettings } from './settings.ts';
import type { MetricsSource, VersionLoad } from './source.ts';

export const DISCOVERY_LOCK = 'discovery';
const CLOCK_WRITES_PER_ROUND = 200;

export interface AutoscalerOptions {
  repo: AutoscalerRepo;
  source: MetricsSource;
  platform: ScalingPlatform;
  metrics: AutoscalerMetrics;
  settings: AutoscalerSettings;
  log: Logger;
  now?: () => Date;
  /** This replica's name in the lock row. */
  replicaId?: string;
}

const iso = (ms: number) => new Date(ms).toISOString();

export function createAutoscaler(options: AutoscalerOptions) {
  const { repo, source, platform, metrics, settings } = options;
  const log = options.log.child({ component: 'autoscaler' });
  const now = () => (options.now ?? (() => new Date()))().getTime();
  const replicaId = options.replicaId ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const defaults = platformPolicy(settings.platformPolicy);
  const lockMs = settings.discoveryLockDurationSeconds * 1000;
  const idleMs = settings.scaleToZeroIdleSeconds * 1000;
  const stepMs = settings.scalingIntervalMs;
  /** The idle clock is written when it moved this much: a quarter of the idle window at most. */
  const idleWriteMs = Math.max(idleMs / 4, stepMs);
  let leaderUntil = 0;
  let nextDiscoveryAt = 0;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  let busy = false;
  let nudged = false;

  const leading = () => now() < leaderUntil;

  async function takeLock() {
    const at = now();
    let held = false;
    try {
      held = await repo.tryLock(DISCOVERY_LOCK, replicaId, iso(at), iso(at + lockMs));
    } catch (error) {
      log.warn({ err: error }, 'discovery lock: store error');
    }
    if (held && !leading()) log.info({ replicaId }, 'discovery lock taken: this replica discovers and scales');
    if (!held && leading()) log.warn({ replicaId }, 'discovery lock lost');
    leaderUntil = held ? at + lockMs : 0;
    metrics.lockHeld.set(held ? 1 : 0);
    if (!held) metrics.lockFailures.inc();
  }

  async function discover() {
    const started = performance.now();
    const at = now();
    const found = await source.discover(settings.discoveryWindowSeconds * 1000);
    const ttlMs = settings.functionTtlSeconds * 1000;
    await repo.markSeen(found, iso(at), iso(at - ttlMs / 4));
    await repo.forgetUnseen(iso(at - ttlMs));
    metrics.discoveryDuration.observe((performance.now() - started) / 1000);
  }

  function windowFor(policies: Policy[]): number {
    let longest = 2 * stepMs;
    for (const policy of policies) {
      longest = Math.max(longest, policy.up.stickiness?.sizeMs ?? 0, policy.down.stickiness?.sizeMs ?? 0);
    }
    return longest + stepMs;
  }

  /** What a round decides with: the active set, what is deployed, the stored desired counts and the load. */
  async function readRound() {
    const [active, deployed, desiredRows] = await Promise.all([repo.functions(), platform.deployed(), repo.desired()]);
    metrics.activeFunctions.set(active.length);
    const policies = new Map<string, Policy>();
    for (const fn of active) {
      const version = deployed.get(fn.version_id);
      if (version) policies.set(fn.version_id, policyFor(version.specs, defaults));
    }
    const loads = await source.load(windowFor([...policies.values()]), stepMs);
    // Desired counts of versions no longer deployed have nothing left to apply to.
    const undeployed = [...new Set(desiredRows.filter((row) => !deployed.has(row.version_id)).map((row) => row.version_id))];
    if (undeployed.length) await repo.forgetDesired(undeployed);
    return { active, deployed, policies, loads, stored: new Map(desiredRows.map((row) => [row.gpu_spec_id, row.desired])) };
  }

  /**
   * The last invocation to decide with. The store's idle clock lags the metrics by up to idleWriteMs;
   * without a metric (after a restart) count from the latest it could be, so a version never goes to zero early.
   */
  function lastInvocationOf(fn: FunctionStateRow, load: VersionLoad | undefined): number | undefined {
    const stored = fn.last_invocation_at ? Date.parse(fn.last_invocation_at) : Number.NEGATIVE_INFINITY;
    const latest = Math.max(load?.lastInvocationAt ?? Number.NEGATIVE_INFINITY, stored + (load?.lastInvocationAt === undefined ? idleWriteMs : 0));
    return Number.isFinite(latest) ? latest : undefined;
  }

  /** One version that takes requests: its desired count, and what of it the round writes and reports. */
  function decideVersion(round: Round, fn: FunctionStateRow, version: DeployedVersion, inputs: RoundInputs, readAt: number) {
    const { specs } = version;
    const { held, current, concurrency } = holding(specs, inputs.stored);
    const load = inputs.loads.get(fn.version_id);
    const policy = inputs.policies.get(fn.version_id)!;
    const min = specs.reduce((sum, spec) => sum + spec.minInstances, 0);
    const max = specs.reduce((sum, spec) => sum + spec.maxInstances, 0);
    const samples = load?.samples ?? [];
    const outcome = version.functionType === 'STREAMING'
      ? decideStreaming(policy, { min, max, current, samples })
      : decide(policy, { now: readAt, current, concurrency, samples, idleMs, stepMs, min, max, lastInvocationAt: lastInvocationOf(fn, load) });
    if (outcome.desired !== current || [...held].some(([specId, count]) => inputs.stored.get(specId) !== count && inputs.stored.has(specId))) {
      for (const [gpuSpecId, desired] of spread(outcome.desired, specs)) {
        if (inputs.stored.get(gpuSpecId) !== desired) round.entries.push({ gpuSpecId, versionId: fn.version_id, desired });
      }
    }
    record(round, fn, outcome, current, load, iso(readAt));
  }

  /** The version's row (written when anything changed, or its idle clock alone), its move, its gauges. */
  function record(round: Round, fn: FunctionStateRow, outcome: Outcome, current: number, load: VersionLoad | undefined, decidedAt: string) {
    const changed = fn.desired !== outcome.desired || fn.reason !== outcome.reason || fn.skipped_status !== null || fn.instances !== current;
    // The idle clock lives in the store (survives a takeover); written only when it moved noticeably.
    const storedInvocation = fn.last_invocation_at ? Date.parse(fn.last_invocation_at) : 0;
    const invoked = load?.lastInvocationAt !== undefined && load.lastInvocationAt > storedInvocation + idleWriteMs;
    const row = { ...fn, skipped_status: null, last_invocation_at: invoked ? iso(load!.lastInvocationAt!) : fn.last_invocation_at };
    if (changed) {
      round.writes.push({
        ...row, desired: outcome.desired, instances: current, utilization: finite(outcome.utilization), reason: outcome.reason, detail: outcome.detail, decided_at: decidedAt,
      });
      if (outcome.desired !== current) {
        round.moves.push({ versionId: fn.version_id, desired: outcome.desired, instances: current, reason: outcome.reason, detail: outcome.detail });
      }
    } else if (invoked) {
      round.clocks.push({ row, stored: fn.last_invocation_at ?? '' });
    }
    round.gauges.push([{ nca_id: fn.nca_id, function_id: fn.function_id, function_version_id: fn.version_id }, outcome.desired, current, outcome.utilization, reasons.indexOf(outcome.reason)]);
  }

  /** Writes the round: desired counts through the deployment path first; false when it refused them. */
  async function applyRound(round: Round, readAt: number): Promise<boolean> {
    if (round.entries.length) {
      try {
        await platform.apply(round.entries, iso(now()), iso(readAt));
      } catch (error) {
        metrics.rejected.inc({ reason: 'platform_api_error' }, round.entries.length);
        log.warn({ err: error, changes: round.entries.length }, 'deployment path refused the desired counts; this round made no decision');
        return false;
      }
      metrics.processed.inc(round.entries.length);
    }
    // Idle clocks alone: the stalest first, a bounded number per round, so many versions busy at once do not
    // make one round slow (the decisions use the metrics' clock; the store's is for a restart or takeover).
    round.clocks.sort((a, b) => a.stored.localeCompare(b.stored));
    await repo.saveRound([...round.writes, ...round.clocks.slice(0, CLOCK_WRITES_PER_ROUND).map((clock) => clock.row)]);
    return true;
  }

  function report(round: Round) {
    for (const move of round.moves) log.info(move, 'scaling decision');
    for (const gauge of [metrics.desired, metrics.current, metrics.utilization, metrics.status]) gauge.reset();
    for (const [labels, desired, current, utilization, reason] of round.gauges) {
      metrics.desired.set(labels, desired);
      metrics.current.set(labels, current);
      if (utilization !== null) metrics.utilization.set(labels, utilization);
      metrics.status.set(labels, reason);
    }
  }

  async function scale() {
    const started = performance.now();
    const readAt = now();
    const inputs = await readRound();
    const round: Round = { entries: [], writes: [], clocks: [], moves: [], gauges: [] };
    for (const fn of inputs.active) {
      const version = inputs.deployed.get(fn.version_id);
      const status = version?.status ?? 'INACTIVE';
      if (version && takesRequests(status)) decideVersion(round, fn, version, inputs, readAt);
      else if (fn.skipped_status !== status) await skip(fn.version_id, status, version);
    }
    // The lock may have lapsed while this round read its inputs: then another replica decides.
    if (!leading() || !(await applyRound(round, readAt))) return;
    report(round);
    metrics.roundDuration.observe((performance.now() - started) / 1000);
  }

  async function skip(versionId: string, status: string, version: DeployedVersion | undefined) {
    const detail = `function status ${status}${version ? '' : ' (not deployed)'} is not deployable; not retried until the status changes`;
    metrics.rejected.inc({ reason: 'not_deployable' });
    log.info({ versionId, status }, 'skipping a function version that is not deployable');
    await repo.markSkipped(versionId, status, detail, iso(now()));
  }

  async function tick() {
    if (now() >= nextDiscoveryAt) {
      nextDiscoveryAt = now() + settings.discoveryIntervalMs;
      await takeLock();
      if (leading()) {
        try {
          await discover();
        } catch (error) {
          log.warn({ err: error }, 'discovery round failed');
        }
      }
    }
    if (!leading()) return;
    try {
      await scale();
    } catch (error) {
      log.warn({ err: error }, 'scaling round failed; no decision this round');
    }
  }

  /** One tick now, or none if one is running (the timer's next one follows). */
  function runOnce(): Promise<void> {
    if (busy) return running;
    busy = true;
    running = tick().finally(() => {
      busy = false;
      if (nudged) {
        nudged = false;
        void runOnce();
      }
    });
    return running;
  }

  return {
    replicaId,
    leading,
    runOnce,

    /** A tick now, or right after the one running: streaming sessions changed, spare instances should follow. */
    nudge() {
      if (busy) nudged = true;
      else void runOnce();
    },

    start() {
      metrics.lockHeld.set(0);
      void runOnce();
      timer = setInterval(() => void runOnce(), settings.scalingIntervalMs);
      timer.unref();
    },

    /** Stops the loops; gives the lock up unless `crash` (tests of takeover). */
    async stop(stopOptions: { release?: boolean } = {}) {
      clearInterval(timer);
      await running;
      if (stopOptions.release !== false && leaderUntil > 0) {
        leaderUntil = 0;
        await repo.unlock(DISCOVERY_LOCK, replicaId).catch(() => {});
      }
    },
  };
}

/** What one scaling round writes and reports. */
interface Round {
  entries: DesiredEntry[];
  writes: FunctionStateRow[];
  /** Rows whose idle clock alone moved, with the stored clock (the stalest are written first). */
  clocks: { row: FunctionStateRow; stored: string }[];
  moves: Record<string, unknown>[];
  gauges: [Record<string, string>, number, number, number | null, number][];
}

type RoundInputs = {
  active: FunctionStateRow[];
  deployed: Map<string, DeployedVersion>;
  policies: Map<string, Policy>;
  loads: Map<string, VersionLoad>;
  /** Desired count per GPU specification, as stored. */
  stored: Map<string, number>;
};

/** The instances a version holds per GPU specification (stored, within its bounds), their sum and mean concurrency. */
function holding(specs: GpuSpecification[], stored: Map<string, number>) {
  const clamp = (count: number, min: number, max: number) => Math.min(max, Math.max(min, count));
  const held = new Map(specs.map((spec) => [spec.gpuSpecificationId, clamp(stored.get(spec.gpuSpecificationId) ?? spec.minInstances, spec.minInstances, spec.maxInstances)]));
  const current = [...held.values()].reduce((sum, count) => sum + count, 0);
  const concurrency = current > 0
    ? specs.reduce((sum, spec) => sum + held.get(spec.gpuSpecificationId)! * spec.maxRequestConcurrency, 0) / current
    : specs[0].maxRequestConcurrency;
  return { held, current, concurrency };
}

function finite(value: number | null): number | null {
  if (value === null) return null;
  return Number.isFinite(value) ? Math.round(value * 10) / 10 : 100_000;
}

export type Autoscaler = ReturnType<typeof createAutoscaler>;
