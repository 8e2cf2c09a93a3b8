// The autoscaler's way into the platform's deployment path (the reference calls the platform API for
// this): read what is deployed, with each version's status and GPU specifications, and set desired counts
// per GPU specification, which placement (control/instances) starts and stops instances toward, so agents
// reconcile as for any deployment change. Every call is timed into platform_api metrics by outcome.
import type { Kysely } from 'kysely';
import type { GpuSpecification } from '../control/deployments/schema.ts';
import type { Database } from '../store/schema.ts';
import type { AutoscalerMetrics } from './metrics.ts';
import type { AutoscalerRepo } from './repo.ts';

export interface DeployedVersion {
  versionId: string;
  ncaId: string;
  functionId: string;
  functionName: string;
  functionType: string;
  status: string;
  specs: GpuSpecification[];
}

export interface DesiredEntry {
  gpuSpecId: string;
  versionId: string;
  desired: number;
}

export interface ScalingPlatform {
  deployed(): Promise<Map<string, DeployedVersion>>;
  /** Sets desired counts (one transaction), then prompts placement. */
  apply(entries: DesiredEntry[], at: string, decidedFrom: string): Promise<void>;
}

export function createScalingPlatform(db: Kysely<Database>, repo: AutoscalerRepo, metrics: AutoscalerMetrics, applied: () => void): ScalingPlatform {
  async function timed<T>(operation: string, call: () => Promise<T>): Promise<T> {
    const started = performance.now();
    let status = 'error';
    try {
      const result = await call();
      status = 'ok';
      return result;
    } finally {
      metrics.platformApiDuration.observe({ operation, status }, performance.now() - started);
    }
  }

  return {
    deployed: () => timed('list_deployments', async () => {
      // One query for every deployed version: the scaling round reads this each time.
      const rows = await db.selectFrom('deployments')
        .innerJoin('function_versions', 'function_versions.version_id', 'deployments.version_id')
        .select(['deployments.version_id', 'deployments.nca_id', 'deployments.function_id', 'deployments.specs',
          'function_versions.status', 'function_versions.function_type', 'function_versions.name'])
        .execute();
      return new Map(rows.map((row) => [row.version_id, {
        versionId: row.version_id, ncaId: row.nca_id, functionId: row.function_id, functionName: row.name, functionType: row.function_type,
        status: row.status, specs: JSON.parse(row.specs) as GpuSpecification[],
      }]));
    }),

    apply: (entries, at, decidedFrom) => timed('set_desired_instances', async () => {
      await repo.setDesired(entries, at, decidedFrom);
      applied();
    }),
  };
}
