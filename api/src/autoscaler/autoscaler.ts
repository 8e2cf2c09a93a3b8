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
import { decide, decideStreaming, platformPolicy, policyFor, reasons, spread, type Policy } from './policy.ts';
import type { AutoscalerRepo, FunctionStateRow } from './repo.ts';
import type { AutoscalerSettings } from './settings.ts';
import type { MetricsSource } from './source.ts';

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

  async function scale() {
    const started = performance.now();
    const readAt = now();
    const [active, deployed, desiredRows] = await Promise.all([repo.functions(), platform.deployed(), repo.desired()]);
    metrics.activeFunctions.set(active.length);
    const stored = new Map(desiredRows.map((row) => [row.gpu_spec_id, row.desired]));
    const policies = new Map<string, Policy>();
    for (const fn of active) {
      const version = deployed.get(fn.version_id);
      if (version) policies.set(fn.version_id, policyFor(version.specs, defaults));
    }
    const loads = await source.load(windowFor([...policies.values()]), stepMs);

    // Desired counts of versions no longer deployed have nothing left to apply to.
    const undeployed = [...new Set(desiredRows.filter((row) => !deployed.has(row.version_id)).map((row) => row.version_id))];
    if (undeployed.length) await repo.forgetDesired(undeployed);

    const decidedAt = iso(readAt);
    const entries: DesiredEntry[] = [];
    const writes: FunctionStateRow[] = [];
    const clocks: { row: FunctionStateRow; stored: string }[] = [];
    const moves: Record<string, unknown>[] = [];
    const gauges: [Record<string, string>, number, number, number | null, number][] = [];
    for (const fn of active) {
      const version = deployed.get(fn.version_id);
      const status = !version ? 'INACTIVE' : version.status;
      if (!version || !takesRequests(status)) {
        if (fn.skipped_status !== status) await skip(fn.version_id, status, version);
        continue;
      }
      const specs = version.specs;
      const clamp = (count: number, min: number, max: number) => Math.min(max, Math.max(min, count));
      const held = new Map(specs.map((spec) => [spec.gpuSpecificationId, clamp(stored.get(spec.gpuSpecificationId) ?? spec.minInstances, spec.minInstances, spec.maxInstances)]));
      const current = [...held.values()].reduce((sum, count) => sum + count, 0);
      const concurrency = current > 0
        ? specs.reduce((sum, spec) => sum + held.get(spec.gpuSpecificationId)! * spec.maxRequestConcurrency, 0) / current
        : specs[0].maxRequestConcurrency;
      const load = loads.get(fn.version_id);
      const storedInvocation = fn.last_invocation_at ? Date.parse(fn.last_invocation_at) : undefined;
      // The store's idle clock lags the metrics by up to idleWriteMs; without a metric (after a restart)
      // count from the latest it could be, so a version never goes to zero early.
      const lastInvocationAt = Math.max(load?.lastInvocationAt ?? Number.NEGATIVE_INFINITY,
        storedInvocation === undefined ? Number.NEGATIVE_INFINITY : storedInvocation + (load?.lastInvocationAt === undefined ? idleWriteMs : 0));
      const min = specs.reduce((sum, spec) => sum + spec.minInstances, 0);
      const max = specs.reduce((sum, spec) => sum + spec.maxInstances, 0);
      const outcome = version.functionType === 'STREAMING'
        ? decideStreaming(policies.get(fn.version_id)!, { min, max, current, samples: load?.samples ?? [] })
        : decide(policies.get(fn.version_id)!, {
          now: readAt, current, concurrency, samples: load?.samples ?? [], idleMs, stepMs, min, max,
          lastInvocationAt: Number.isFinite(lastInvocationAt) ? lastInvocationAt : undefined,
        });
      if (outcome.desired !== current || [...held].some(([specId, count]) => stored.get(specId) !== count && stored.has(specId))) {
        for (const [gpuSpecId, desired] of spread(outcome.desired, specs)) {
          if (stored.get(gpuSpecId) !== desired) entries.push({ gpuSpecId, versionId: fn.version_id, desired });
        }
      }
      const changed = fn.desired !== outcome.desired || fn.reason !== outcome.reason || fn.skipped_status !== null || fn.instances !== current;
      // The idle clock lives in the store (survives a takeover); written only when it moved noticeably.
      const invoked = load?.lastInvocationAt !== undefined && load.lastInvocationAt > (storedInvocation ?? 0) + idleWriteMs;
      const row = { ...fn, skipped_status: null, last_invocation_at: invoked ? iso(load!.lastInvocationAt!) : fn.last_invocation_at };
      if (changed) {
        writes.push({
          ...row, desired: outcome.desired, instances: current, utilization: finite(outcome.utilization), reason: outcome.reason, detail: outcome.detail, decided_at: decidedAt,
        });
        if (outcome.desired !== current) {
          moves.push({ versionId: fn.version_id, desired: outcome.desired, instances: current, reason: outcome.reason, detail: outcome.detail });
        }
      } else if (invoked) {
        clocks.push({ row, stored: fn.last_invocation_at ?? '' });
      }
      gauges.push([{ nca_id: fn.nca_id, function_id: fn.function_id, function_version_id: fn.version_id }, outcome.desired, current, outcome.utilization, reasons.indexOf(outcome.reason)]);
    }

    // The lock may have lapsed while this round read its inputs: then another replica decides.
    if (!leading()) return;
    if (entries.length) {
      try {
        await platform.apply(entries, iso(now()), iso(readAt));
      } catch (error) {
        metrics.rejected.inc({ reason: 'platform_api_error' }, entries.length);
        log.warn({ err: error, changes: entries.length }, 'deployment path refused the desired counts; this round made no decision');
        return;
      }
      metrics.processed.inc(entries.length);
    }
    // Idle clocks alone: the stalest first, a bounded number per round, so many versions busy at once do not
    // make one round slow (the decisions use the metrics' clock; the store's is for a restart or takeover).
    clocks.sort((a, b) => a.stored.localeCompare(b.stored));
    await repo.saveRound([...writes, ...clocks.slice(0, CLOCK_WRITES_PER_ROUND).map((clock) => clock.row)]);
    for (const move of moves) log.info(move, 'scaling decision');
    for (const gauge of [metrics.desired, metrics.current, metrics.utilization, metrics.status]) gauge.reset();
    for (const [labels, desired, current, utilization, reason] of gauges) {
      metrics.desired.set(labels, desired);
      metrics.current.set(labels, current);
      if (utilization !== null) metrics.utilization.set(labels, utilization);
      metrics.status.set(labels, reason);
    }
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

function finite(value: number | null): number | null {
  if (value === null) return null;
  return Number.isFinite(value) ? Math.round(value * 10) / 10 : 100_000;
}

export type Autoscaler = ReturnType<typeof createAutoscaler>;
