// How placement's instances show outside it: the management API's activeInstances and healthInfo (why
// a version is not fully running), and the svc_function_instances metric. Reads only; the reasons an
// instance could not be placed are kept here from round to round, and logged when they change.
import type { FunctionInstances } from '../../domain/load.ts';
import type { Logger } from '../../logger.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import type { HealthInfo, Instance } from '../functions/schema.ts';
import type { InstanceRow } from './repo.ts';

/**
 * Agent states whose report message says why the instance is not running: a failure with the instance's
 * last lines, or, while starting, its last health check ("GET /health → 404 (expected 200), 12 tries, …").
 */
const NOT_RUNNING = new Set(['FAILED', 'UNHEALTHY', 'RESTARTING', 'STARTING']);

const reasonOf = (row: InstanceRow) => (row.message && NOT_RUNNING.has(row.state) ? row.message : undefined);

const apiStatus: Record<string, Instance['instanceStatus']> = {
  PENDING: 'STARTING', STARTING: 'STARTING', RESTARTING: 'STARTING', RUNNING: 'RUNNING', UNHEALTHY: 'ERRORED',
  FAILED: 'ERRORED', EXITED: 'TERMINATED', STOPPED: 'TERMINATED',
};

function toInstance(row: InstanceRow, cluster: ClusterRow | undefined): Instance {
  return {
    instanceId: row.instance_id, functionId: row.function_id, functionVersionId: row.version_id, instanceType: row.instance_type,
    instanceStatus: apiStatus[row.state] ?? 'STARTING', ncaId: row.nca_id, gpu: row.gpu,
    backend: cluster?.group_name ?? '', location: cluster?.name, instanceCreatedAt: row.created_at, instanceUpdatedAt: row.updated_at,
    restartCount: row.restarts,
    ...(reasonOf(row) ? { reason: reasonOf(row) } : {}),
  };
}

/** The desired instances of some versions, as the management API lists them. */
export function instancesOf(versionIds: string[], held: Iterable<InstanceRow>, clusters: Map<string, ClusterRow>): Map<string, Instance[]> {
  const wanted = new Set(versionIds);
  const byVersion = new Map<string, Instance[]>();
  for (const row of held) {
    if (!wanted.has(row.version_id)) continue;
    const list = byVersion.get(row.version_id) ?? [];
    list.push(toInstance(row, clusters.get(row.cluster_id)));
    byVersion.set(row.version_id, list);
  }
  return byVersion;
}

/** Why a version is not (fully) running: the reasons it could not be placed, then its failing instances' last messages. */
export function healthInfoOf(versionId: string, unplaced: HealthInfo[], held: Iterable<InstanceRow>, backendOf: (clusterId: string) => string): HealthInfo[] | undefined {
  const info = [...unplaced];
  for (const row of held) {
    const reason = row.version_id === versionId ? reasonOf(row) : undefined;
    if (reason) info.push({ gpu: row.gpu, backend: backendOf(row.cluster_id), instanceType: row.instance_type, error: reason });
  }
  return info.length ? info : undefined;
}

/** Instances per version, running or starting (metrics: svc_function_instances). */
export function instanceCounts(held: Iterable<InstanceRow>): FunctionInstances[] {
  const byVersion = new Map<string, FunctionInstances>();
  for (const row of held) {
    let counts = byVersion.get(row.version_id);
    if (!counts) byVersion.set(row.version_id, counts = { ncaId: row.nca_id, functionId: row.function_id, versionId: row.version_id, running: 0, starting: 0 });
    if (row.state === 'RUNNING') counts.running++;
    else counts.starting++;
  }
  return [...byVersion.values()];
}

/** Why some instances of each version have no place, as of the last round. */
export class UnplacedReasons {
  #reasons = new Map<string, HealthInfo[]>();
  readonly #log: Logger;

  constructor(log: Logger) {
    this.#log = log;
  }

  of(versionId: string): HealthInfo[] {
    return this.#reasons.get(versionId) ?? [];
  }

  /** Keeps a round's reasons; a version's line is logged when its reasons appear, change or clear. */
  update(reasons: Map<string, HealthInfo[]>): void {
    const said = (list: HealthInfo[] | undefined) => list?.map((reason) => reason.error).join('; ');
    for (const versionId of new Set([...reasons.keys(), ...this.#reasons.keys()])) {
      const now = said(reasons.get(versionId));
      if (now === said(this.#reasons.get(versionId))) continue;
      if (now) this.#log.warn({ versionId, reason: now }, 'deployment not fully placed');
      else this.#log.info({ versionId }, 'deployment placed');
    }
    this.#reasons = reasons;
  }
}
