// One placement round's decisions: per deployment and GPU specification, start instances up to the
// target on clusters with room and stop those beyond it. Its work is bounded: at most
// MAX_STARTS_PER_ROUND new instances (the rounds that follow close a larger gap) and a turn of the event
// loop every YIELD_EVERY deployments (the SQLite driver never yields by itself).
import { randomUUID } from 'node:crypto';
import { yieldToEventLoop } from '../../coalesce.ts';
import type { Logger } from '../../logger.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import type { DeploymentRow } from '../deployments/repo.ts';
import type { GpuSpecification } from '../deployments/schema.ts';
import type { HealthInfo } from '../functions/schema.ts';
import { chooseCluster, victimsOf, type ClusterUse } from './choose.ts';
import type { HeldIndex, PlacedInstances } from './placed.ts';
import type { InstanceRow } from './repo.ts';
import { targetsOf, wakeSpecOf, type Demand } from './targets.ts';

const MAX_STARTS_PER_ROUND = 50;
/** Also status.ts's: a loop over every deployment lets the event loop turn this often. */
export const YIELD_EVERY = 50;

/** What a round reads from the store before it decides anything. */
export interface RoundWorld {
  deployments: DeploymentRow[];
  clusters: ClusterRow[];
  /** The autoscaler's desired count per GPU specification id. */
  desired?: Map<string, number>;
  /** Each account's maxInstancesAllowed; no entry: no limit. */
  limits?: Map<string, number>;
  at: Date;
}

export interface RoundParts {
  placed: PlacedInstances;
  demand: Demand;
  use: ClusterUse;
  /** The node of the cluster a new instance goes to (choose.ts chooseNode); null: none linked with room yet. */
  nodeFor(clusterId: string, gpu: string): string | null;
  inSession(instanceId: string): boolean;
  /** Tells the autoscaler a waiting request woke a version from zero; absent without an autoscaler. */
  wake?: (version: { versionId: string; ncaId: string; functionId: string }, gpuSpecId: string, at: string) => Promise<void>;
  /** Without an autoscaler: how long a woken version keeps its instance after its last request. */
  idleBeforeZeroMs: number;
  log: Logger;
}

export interface RoundOutcome {
  /** versionId → desired instances per GPU specification id. */
  targets: Map<string, Map<string, number>>;
  /** versionId → why some of its instances have no place. */
  unplaced: Map<string, HealthInfo[]>;
  /** The start budget ran out: another round should follow. */
  capped: boolean;
}

class Round {
  readonly outcome: RoundOutcome = { targets: new Map(), unplaced: new Map(), capped: false };
  readonly #world: RoundWorld;
  readonly #parts: RoundParts;
  readonly #held: HeldIndex;
  readonly #at: string;
  #starts = 0;

  constructor(world: RoundWorld, parts: RoundParts) {
    this.#world = world;
    this.#parts = parts;
    this.#held = parts.placed.index();
    this.#at = world.at.toISOString();
  }

  async run(): Promise<RoundOutcome> {
    for (const [index, deployment] of this.#world.deployments.entries()) {
      if (index % YIELD_EVERY === YIELD_EVERY - 1) await yieldToEventLoop();
      const targets = await this.#targetsOf(deployment);
      this.outcome.targets.set(deployment.version_id, targets);
      for (const spec of deployment.specs) {
        const mine = this.#held.bySpec.get(spec.gpuSpecificationId) ?? [];
        const target = targets.get(spec.gpuSpecificationId) ?? 0;
        await this.#start(deployment, spec, target - mine.length, target);
        for (const victim of victimsOf(mine, mine.length - target, this.#parts.inSession)) await this.#parts.placed.stop(victim, this.#at);
      }
    }
    this.outcome.capped = this.#starts >= MAX_STARTS_PER_ROUND;
    return this.outcome;
  }

  /**
   * A version held at zero with requests waiting gets one instance at once on its wake specification, and
   * the autoscaler is told, so it goes back to zero only after its idle window. Without an autoscaler
   * it keeps that instance for idleBeforeZeroMs after its last request.
   */
  async #targetsOf(deployment: DeploymentRow): Promise<Map<string, number>> {
    const { demand, wake, idleBeforeZeroMs, log } = this.#parts;
    const targets = targetsOf(deployment.specs, this.#world.desired);
    const waiting = demand.waiting(deployment.version_id);
    const lingering = !wake && demand.within(deployment.version_id, this.#world.at.getTime(), idleBeforeZeroMs);
    const woken = waiting || lingering ? wakeSpecOf(targets, deployment.specs) : undefined;
    if (!woken) return targets;
    targets.set(woken.gpuSpecificationId, 1);
    if (waiting && wake) {
      const version = { versionId: deployment.version_id, ncaId: deployment.nca_id, functionId: deployment.function_id };
      await wake(version, woken.gpuSpecificationId, this.#at)
        .catch((error) => log.warn({ err: error, versionId: deployment.version_id }, 'could not record a wake from zero; the instance starts anyway'));
    }
    return targets;
  }

  /** Starts up to `missing` instances of `spec`, within the round's budget; the first refusal is recorded as the reason. */
  async #start(deployment: DeploymentRow, spec: GpuSpecification, missing: number, target: number): Promise<void> {
    const { placed, use } = this.#parts;
    const { perAccount } = this.#held;
    for (; missing > 0 && this.#starts < MAX_STARTS_PER_ROUND; missing--) {
      const quota = { held: perAccount.get(deployment.nca_id) ?? 0, limit: this.#world.limits?.get(deployment.nca_id) ?? Number.POSITIVE_INFINITY };
      const cluster = chooseCluster(deployment.nca_id, spec, this.#world.clusters, use, quota);
      if (typeof cluster === 'string') {
        const reason = { gpu: spec.gpu, backend: spec.backend ?? '', instanceType: spec.instanceType, error: `${missing} of ${target} instances not placed: ${cluster}` };
        this.outcome.unplaced.set(deployment.version_id, [...this.outcome.unplaced.get(deployment.version_id) ?? [], reason]);
        return;
      }
      const row: InstanceRow = {
        instance_id: randomUUID(), nca_id: deployment.nca_id, function_id: deployment.function_id, version_id: deployment.version_id,
        cluster_id: cluster.id, gpu_spec_id: spec.gpuSpecificationId, gpu: spec.gpu, instance_type: spec.instanceType,
        state: 'PENDING', desired: 1, endpoint: null, restarts: 0, message: null, node_id: this.#parts.nodeFor(cluster.id, spec.gpu),
        created_at: this.#at, updated_at: this.#at,
      };
      perAccount.set(row.nca_id, quota.held + 1);
      await placed.add(row);
      this.#starts++;
    }
  }
}

export function placeDeployments(world: RoundWorld, parts: RoundParts): Promise<RoundOutcome> {
  return new Round(world, parts).run();
}
