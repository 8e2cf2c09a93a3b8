// What `svc autoscaler status` shows: per deployed version of an account, its instances now, the desired
// count placement works toward, and the autoscaler's last reason.
import type { PlatformMetrics } from '../http/metrics.ts';
import type { DeployedVersion, ScalingPlatform } from './platform.ts';
import { platformPolicy, policyFor, type AutoscalingConfiguration } from './policy.ts';
import type { AutoscalerRepo } from './repo.ts';
import type { FunctionScaling } from './schema.ts';

export function createScalingStatus(repo: AutoscalerRepo, platform: ScalingPlatform, metrics: PlatformMetrics, platformOverride?: AutoscalingConfiguration) {
  const defaults = platformPolicy(platformOverride);

  /** Instances placement holds now in this process (none where only the autoscaler role runs). */
  async function liveInstances(): Promise<Map<string, { running: number; starting: number }>> {
    const out = new Map<string, { running: number; starting: number }>();
    for (const { versionId, running, starting } of metrics.snapshot().instances) {
      const counts = out.get(versionId) ?? { running: 0, starting: 0 };
      counts.running += running;
      counts.starting += starting;
      out.set(versionId, counts);
    }
    return out;
  }

  function entry(version: DeployedVersion, stored: Map<string, number>, row: Awaited<ReturnType<AutoscalerRepo['functions']>>[number] | undefined,
    instances: { running: number; starting: number } | undefined): FunctionScaling {
    const desired = version.specs.reduce((sum, spec) =>
      sum + Math.min(spec.maxInstances, Math.max(spec.minInstances, stored.get(spec.gpuSpecificationId) ?? spec.minInstances)), 0);
    return {
      functionId: version.functionId, functionVersionId: version.versionId, functionName: version.functionName, functionStatus: version.status,
      instances: instances ?? { running: 0, starting: 0 }, desiredInstances: desired,
      minInstances: version.specs.reduce((sum, spec) => sum + spec.minInstances, 0),
      maxInstances: version.specs.reduce((sum, spec) => sum + spec.maxInstances, 0),
      policy: policyFor(version.specs, defaults).source,
      reason: row?.reason ?? (row ? 'discovered' : 'not-active'),
      detail: row?.detail ?? (row ? 'no decision yet' : 'no recent invocation and no instance; placement holds minInstances'),
      utilization: row?.utilization ?? null, decidedAt: row?.decided_at ?? null, lastInvocationAt: row?.last_invocation_at ?? null,
    };
  }

  return {
    async of(ncaId: string): Promise<FunctionScaling[]> {
      const [deployed, active, desired, instances] = await Promise.all([platform.deployed(), repo.functions(), repo.desired(), liveInstances()]);
      const rows = new Map(active.map((row) => [row.version_id, row]));
      const stored = new Map(desired.map((row) => [row.gpu_spec_id, row.desired]));
      return [...deployed.values()]
        .filter((version) => version.ncaId === ncaId)
        .sort((a, b) => a.functionName.localeCompare(b.functionName) || a.versionId.localeCompare(b.versionId))
        .map((version) => entry(version, stored, rows.get(version.versionId), instances.get(version.versionId)));
    },
  };
}

export type ScalingStatus = ReturnType<typeof createScalingStatus>;
