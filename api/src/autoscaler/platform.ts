// The autoscaler's way into the platform's deployment path (the reference calls the platform API for
// this): read what is deployed, with each version's status and GPU specifications, and set desired counts
// per GPU specification, which placement (control/instances) starts and stops instances toward, so agents
// reconcile as for any deployment change. It reads through the control plane's repos (the specifications
// decoded there). Every call is timed into platform_api metrics by outcome.
import type { DeploymentsRepo } from '../control/deployments/repo.ts';
import type { GpuSpecification } from '../control/deployments/schema.ts';
import type { FunctionsRepo } from '../control/functions/repo.ts';
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

export interface ScalingPlatformOptions {
  deployments: DeploymentsRepo;
  versions: Pick<FunctionsRepo, 'statuses'>;
  repo: AutoscalerRepo;
  metrics: AutoscalerMetrics;
  /** Desired counts were written: placement should look. */
  applied: () => void;
}

export function createScalingPlatform({ deployments, versions, repo, metrics, applied }: ScalingPlatformOptions): ScalingPlatform {
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
      // Two queries for every deployed version, whatever their number: the scaling round reads this each time.
      const rows = await deployments.listAll();
      const kinds = new Map((await versions.statuses(rows.map((row) => row.version_id))).map((version) => [version.version_id, version]));
      const deployed = new Map<string, DeployedVersion>();
      for (const row of rows) {
        const version = kinds.get(row.version_id);
        if (!version) continue;
        deployed.set(row.version_id, {
          versionId: row.version_id, ncaId: row.nca_id, functionId: row.function_id, functionName: version.name,
          functionType: version.function_type, status: version.status, specs: row.specs,
        });
      }
      return deployed;
    }),

    apply: (entries, at, decidedFrom) => timed('set_desired_instances', async () => {
      await repo.setDesired(entries, at, decidedFrom);
      applied();
    }),
  };
}
