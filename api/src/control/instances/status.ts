// A function version's status as its instances make it: INACTIVE → DEPLOYING → ACTIVE ⇄ DEGRADING /
// DEGRADED, ERROR when every wanted instance fails (wire-reference 2). Deleting the deployment (not
// placement) brings a version back to INACTIVE. The rule is pure; updateStatuses applies it to a round.
import { yieldToEventLoop } from '../../coalesce.ts';
import type { Logger } from '../../logger.ts';
import type { DeploymentRow } from '../deployments/repo.ts';
import type { GpuSpecification } from '../deployments/schema.ts';
import type { FunctionsRepo } from '../functions/repo.ts';
import type { FunctionStatus } from '../functions/schema.ts';
import type { FunctionsService } from '../functions/service.ts';
import type { InstanceRow } from './repo.ts';
import { YIELD_EVERY } from './round.ts';

/** Instances that restarted this often without becoming ready count as failing for ERROR status. */
export const CRASH_LOOP_RESTARTS = 3;

export interface StatusFacts {
  /** Sum of the specifications' minInstances. */
  minimum: number;
  /** Instances placement wants this round (the targets' sum). */
  target: number;
  ready: number;
  /** Every instance it holds has failed or is crash-looping, and none is ready. */
  failing: boolean;
}

export function statusFacts(specs: GpuSpecification[], target: number, held: InstanceRow[]): StatusFacts {
  const ready = held.filter((row) => row.state === 'RUNNING').length;
  const failing = held.length > 0 && ready === 0
    && held.every((row) => row.state === 'FAILED' || (row.restarts >= CRASH_LOOP_RESTARTS && row.state !== 'STARTING'));
  return { minimum: specs.reduce((sum, spec) => sum + spec.minInstances, 0), target, ready, failing };
}

/**
 * DEPLOYING until ready ≥ minimum (and ≥ 1 when any instance is wanted); then ACTIVE, DEGRADING below the
 * minimum, DEGRADED at zero ready; ERROR when every wanted instance fails, left once one is ready again.
 * With minInstances 0, zero ready is a normal state (scaled to zero, or waking for a queued request), so
 * such a version stays ACTIVE and keeps taking requests while its instances start.
 */
export function nextStatus(current: FunctionStatus, facts: StatusFacts): FunctionStatus {
  const { minimum, target, ready, failing } = facts;
  if (failing) return 'ERROR';
  const satisfied = ready >= minimum && (target === 0 || ready > 0 || minimum === 0);
  if (current === 'INACTIVE' || current === 'DEPLOYING') return satisfied ? 'ACTIVE' : 'DEPLOYING';
  if (satisfied) return 'ACTIVE';
  if (current === 'ERROR') return ready > 0 ? 'DEGRADING' : 'ERROR';
  return ready === 0 ? 'DEGRADED' : 'DEGRADING';
}

export interface StatusStore {
  functionsRepo: Pick<FunctionsRepo, 'statuses'>;
  functions: Pick<FunctionsService, 'setStatus'>;
  log: Logger;
}

/**
 * Moves each deployed version to the status its instances give it, from one read of all their statuses.
 * `targets`: desired instances per version and specification this round; `held`: desired instances per version.
 */
export async function updateStatuses(deployments: DeploymentRow[], targets: Map<string, Map<string, number>>,
  held: Map<string, InstanceRow[]>, store: StatusStore): Promise<void> {
  const versions = await store.functionsRepo.statuses(deployments.map((deployment) => deployment.version_id));
  const current = new Map(versions.map((version) => [version.version_id, version.status as FunctionStatus]));
  for (const [index, deployment] of deployments.entries()) {
    if (index % YIELD_EVERY === YIELD_EVERY - 1) await yieldToEventLoop();
    const status = current.get(deployment.version_id);
    if (!status) continue;
    const target = [...targets.get(deployment.version_id)?.values() ?? []].reduce((sum, count) => sum + count, 0);
    const facts = statusFacts(deployment.specs, target, held.get(deployment.version_id) ?? []);
    const next = nextStatus(status, facts);
    if (next === status) continue;
    store.log.info({ versionId: deployment.version_id, from: status, to: next, ready: facts.ready, minimum: facts.minimum }, 'function status');
    await store.functions.setStatus(deployment.version_id, next);
  }
}
