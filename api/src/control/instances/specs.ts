// What an agent is told to run: an instance's spec, built from its version's document, its deployment's
// specification, the version's secrets and the account's registry credential. Built only for a desired
// set that changed (agents.ts), since each spec costs a version read and a secrets decryption.
import type { InstanceSpec } from '../../compute/protocol.ts';
import { parseDuration } from '../../duration.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import { resourcesOf } from '../clusters/resources.ts';
import type { DeploymentRow } from '../deployments/repo.ts';
import { documentOf, type FunctionsRepo } from '../functions/repo.ts';
import type { FunctionsService } from '../functions/service.ts';
import type { RegistryService } from '../registry/service.ts';
import type { InstanceRow } from './repo.ts';

const DEFAULT_GRACE_MS = 600_000;

export interface SpecSources {
  functionsRepo: Pick<FunctionsRepo, 'findVersionById'>;
  functions: Pick<FunctionsService, 'secretsOf'>;
  registry: Pick<RegistryService, 'pullAuthFor'>;
  /** Start-up grace when a deployment's configuration does not give startupGracePeriod. */
  defaultStartupGraceMs?: number;
}

/** What the specs of one desired set are built from: this round's deployments and clusters. */
export interface SpecContext {
  deployed: Map<string, DeploymentRow>;
  clusters: Map<string, ClusterRow>;
}

export function createSpecBuilder(sources: SpecSources) {
  async function specOf(row: InstanceRow, context: SpecContext): Promise<InstanceSpec | undefined> {
    const version = await sources.functionsRepo.findVersionById(row.version_id);
    const deployment = context.deployed.get(row.version_id);
    if (!version || !deployment) return undefined;
    const fn = documentOf(version);
    const configured = deployment.specs.find((spec) => spec.gpuSpecificationId === row.gpu_spec_id)?.configuration?.startupGracePeriod;
    const grace = typeof configured === 'string' ? parseDuration(configured) : undefined;
    const registryAuth = await sources.registry.pullAuthFor(row.nca_id, fn.containerImage);
    const cluster = context.clusters.get(row.cluster_id);
    const resources = cluster && resourcesOf(cluster.gpus, row.gpu, row.instance_type);
    return {
      instanceId: row.instance_id, ncaId: row.nca_id, functionId: row.function_id, functionVersionId: row.version_id,
      functionName: fn.name, functionType: fn.functionType, gpu: row.gpu, instanceType: row.instance_type,
      backend: cluster?.group_name ?? '',
      containerImage: fn.containerImage, containerArgs: fn.containerArgs, containerEnvironment: fn.containerEnvironment ?? [],
      secrets: await sources.functions.secretsOf(row.version_id),
      inferenceUrl: fn.inferenceUrl, inferencePort: fn.inferencePort, health: fn.health,
      startupGracePeriodMs: grace ?? sources.defaultStartupGraceMs ?? DEFAULT_GRACE_MS,
      ...(registryAuth ? { registryAuth } : {}),
      ...(resources ? { resources } : {}),
    };
  }

  /** The specs of a desired set; instances whose version or deployment has gone are left out. */
  return async function desiredSet(instances: InstanceRow[], context: SpecContext): Promise<InstanceSpec[]> {
    const specs: InstanceSpec[] = [];
    for (const row of instances) {
      const spec = await specOf(row, context);
      if (spec) specs.push(spec);
    }
    return specs;
  };
}
