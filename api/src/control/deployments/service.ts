// Deployments (wire-reference 3): which GPU specifications a function version runs on and within which
// instance bounds. Creating one moves the version to DEPLOYING, deleting it to INACTIVE; the execution
// plane is told of every change so its agents reconcile without polling.
import { randomUUID } from 'node:crypto';
import type { Principal } from '../../domain/principal.ts';
import { conflict, invalid, notFound } from '../../domain/problem.ts';
import type { InvalidField } from '../../domain/problem.ts';
import { isUniqueViolation } from '../../store/store.ts';
import type { AccountsService } from '../accounts/service.ts';
import type { ClustersService } from '../clusters/service.ts';
import type { FunctionRecord } from '../functions/schema.ts';
import type { FunctionsService } from '../functions/service.ts';
import type { DeploymentRow, DeploymentsRepo } from './repo.ts';
import type { CreateDeployment, Deployment, GpuSpecification, HealthInfo, PatchGpuSpecification, UpdateDeployment } from './schema.ts';

/** Told whenever a version's deployment is created, changed or removed. */
export type DeploymentListener = (versionId: string) => void;

/** The longest a graceful undeploy keeps a version's instances for its running requests. */
export const DRAIN_MAX_MS = 600_000;

export function createDeploymentsService(
  repo: DeploymentsRepo,
  functions: FunctionsService,
  clusters: ClustersService,
  accounts: AccountsService,
  now: () => Date = () => new Date(),
) {
  const listeners: DeploymentListener[] = [];
  const changed = (versionId: string) => listeners.forEach((listener) => listener(versionId));
  /** Why a version is not (fully) running, from placement (wired once the execution plane exists). */
  let healthOf: (versionId: string) => HealthInfo[] | undefined = () => undefined;

  async function toDeployment(row: DeploymentRow): Promise<Deployment> {
    const version = await functions.requireVersion(row.nca_id, row.function_id, row.version_id);
    const healthInfo = healthOf(row.version_id);
    return {
      deploymentId: row.deployment_id,
      functionId: row.function_id,
      functionVersionId: row.version_id,
      functionName: version.name,
      ncaId: row.nca_id,
      functionStatus: version.status as Deployment['functionStatus'],
      deploymentSpecifications: row.specs,
      ...(healthInfo?.length ? { healthInfo } : {}),
      createdAt: row.created_at,
      lastUpdatedAt: row.updated_at,
    };
  }

  /**
   * Every specification must name a GPU and instance type some usable cluster offers. One offered only by
   * clusters whose agent runs instances without isolation, which run their own account's alone, is a
   * conflict that says what the cluster lacks.
   */
  async function assertOffered(ncaId: string, specs: CreateDeployment['deploymentSpecifications']) {
    const errors: InvalidField[] = [];
    for (const [index, spec] of specs.entries()) {
      const offering = await clusters.offering(ncaId, spec);
      if (offering.length > 0) continue;
      const unisolated = (await clusters.offering(ncaId, spec, { ignoringIsolation: true }))[0];
      if (unisolated) {
        throw conflict(`Cluster '${unisolated.name}' runs instances without a sandbox (${unisolated.unisolated_reason}), so it runs only its own account's functions; `
          + 'install bubblewrap and nftables and run its agent as root (docs/security.md), or deploy to another cluster');
      }
      const where = [spec.backend && `cluster group '${spec.backend}'`, spec.clusters?.length && `clusters ${spec.clusters.join(', ')}`]
        .filter(Boolean).join(' and ');
      errors.push({
        field: `deploymentSpecifications.${index}.${spec.clusters?.length ? 'clusters' : 'gpu'}`,
        message: `GPU '${spec.gpu}' with instance type '${spec.instanceType}' is not offered by ${where || 'any cluster group the account may use'} (see GET /v2/svc/clusterGroups)`,
      });
    }
    if (errors.length) throw invalid(errors);
  }

  /** `spare` keeps instances ready for people arriving: it means nothing to a function invoked per request. */
  function assertSpareFits(functionType: string, specs: { autoscalingConfiguration?: { spare?: number } }[], field: (index: number) => string) {
    if (functionType === 'STREAMING') return;
    const errors = specs.flatMap((spec, index) => (spec.autoscalingConfiguration?.spare === undefined ? [] : [{
      field: field(index), message: 'only STREAMING functions keep spare instances; the utilization policy scales this function',
    }]));
    if (errors.length) throw invalid(errors);
  }

  const minimumOf = (specs: { minInstances: number }[]) => specs.reduce((sum, spec) => sum + spec.minInstances, 0);

  /**
   * The instances a version's deployment asks for at least (its minInstances) count against the
   * account's maxInstancesAllowed with those of its other deployments. Only a raise is checked, so a
   * deployment over a lowered limit can still shrink.
   */
  async function assertWithinQuota(ncaId: string, versionId: string, before: number, after: number) {
    if (after <= before) return;
    const others = (await repo.listByAccount(ncaId)).filter((row) => row.version_id !== versionId);
    await accounts.checkQuota(ncaId, 'instances', others.reduce((sum, row) => sum + minimumOf(row.specs), 0), after);
  }

  async function requireByVersion(principal: Principal, functionId: string, versionId: string) {
    await functions.requireVersion(principal.ncaId, functionId, versionId);
    const row = await repo.findByVersion(principal.ncaId, versionId);
    if (!row) throw notFound(`Function id '${functionId}', version '${versionId}': not deployed`);
    return row;
  }

  async function requireById(principal: Principal, deploymentId: string) {
    const row = await repo.findById(principal.ncaId, deploymentId);
    if (!row) throw notFound(`Deployment '${deploymentId}' does not exist`);
    return row;
  }

  async function saveSpecs(row: DeploymentRow, specs: GpuSpecification[]): Promise<DeploymentRow> {
    const at = now().toISOString();
    await repo.updateSpecs(row.deployment_id, specs, at);
    changed(row.version_id);
    return { ...row, specs, updated_at: at };
  }

  return {
    onChange(listener: DeploymentListener) {
      listeners.push(listener);
    },

    /** Lets the execution plane say why a deployment is not (fully) running (healthInfo). */
    useHealthInfo(source: (versionId: string) => HealthInfo[] | undefined) {
      healthOf = source;
    },

    async create(principal: Principal, functionId: string, versionId: string, body: CreateDeployment): Promise<Deployment> {
      const version = await functions.requireVersion(principal.ncaId, functionId, versionId);
      assertSpareFits(version.function_type, body.deploymentSpecifications, (index) => `deploymentSpecifications.${index}.autoscalingConfiguration.spare`);
      await assertOffered(principal.ncaId, body.deploymentSpecifications);
      await assertWithinQuota(principal.ncaId, versionId, 0, minimumOf(body.deploymentSpecifications));
      const at = now().toISOString();
      const specs: GpuSpecification[] = body.deploymentSpecifications.map((spec) => ({ ...spec, gpuSpecificationId: randomUUID() }));
      const row: DeploymentRow = {
        deployment_id: randomUUID(), function_id: functionId, version_id: versionId, nca_id: principal.ncaId,
        specs, created_at: at, updated_at: at,
      };
      try {
        await repo.insert(row);
      } catch (error) {
        if (isUniqueViolation(error)) throw conflict(`Function id '${functionId}', version '${versionId}' is already deployed; update or delete that deployment`);
        throw error;
      }
      await repo.drains.end(versionId); // deployed again while an earlier undeploy drained it
      await functions.setStatus(versionId, 'DEPLOYING');
      changed(versionId);
      return toDeployment(row);
    },

    async get(principal: Principal, functionId: string, versionId: string): Promise<Deployment> {
      return toDeployment(await requireByVersion(principal, functionId, versionId));
    },

    async getById(principal: Principal, deploymentId: string): Promise<Deployment> {
      return toDeployment(await requireById(principal, deploymentId));
    },

    async update(principal: Principal, functionId: string, versionId: string, body: UpdateDeployment): Promise<Deployment> {
      const row = await requireByVersion(principal, functionId, versionId);
      const { specs } = row;
      const before = minimumOf(specs);
      const errors: InvalidField[] = [];
      body.deploymentSpecifications.forEach((change, index) => {
        const target = specs.find((spec) => (change.gpuSpecificationId
          ? spec.gpuSpecificationId === change.gpuSpecificationId
          : spec.gpu === change.gpu && (!change.instanceType || spec.instanceType === change.instanceType)));
        if (!target) {
          errors.push({ field: `deploymentSpecifications.${index}`, message: 'matches no specification of this deployment (give gpuSpecificationId, or gpu and instanceType)' });
          return;
        }
        Object.assign(target, { minInstances: change.minInstances, maxInstances: change.maxInstances },
          change.maxRequestConcurrency ? { maxRequestConcurrency: change.maxRequestConcurrency } : {});
      });
      if (errors.length) throw invalid(errors);
      await assertWithinQuota(principal.ncaId, versionId, before, minimumOf(specs));
      return toDeployment(await saveSpecs(row, specs));
    },

    async patchGpuSpecification(principal: Principal, deploymentId: string, gpuSpecId: string, body: PatchGpuSpecification): Promise<GpuSpecification> {
      const row = await requireById(principal, deploymentId);
      const { specs } = row;
      const spec = specs.find((candidate) => candidate.gpuSpecificationId === gpuSpecId);
      if (!spec) throw notFound(`GPU specification '${gpuSpecId}' is not part of deployment '${deploymentId}'`);
      const merged = { ...spec, ...body };
      if (merged.minInstances > merged.maxInstances) {
        throw invalid([{ field: body.maxInstances !== undefined ? 'maxInstances' : 'minInstances', message: `minInstances ${merged.minInstances} exceeds maxInstances ${merged.maxInstances}` }]);
      }
      const spare = merged.autoscalingConfiguration?.spare;
      if (spare !== undefined && spare > merged.maxInstances) {
        throw invalid([{ field: 'autoscalingConfiguration.spare', message: `spare ${spare} exceeds maxInstances ${merged.maxInstances}` }]);
      }
      if (body.autoscalingConfiguration) {
        const version = await functions.requireVersion(principal.ncaId, row.function_id, row.version_id);
        assertSpareFits(version.function_type, [body], () => 'autoscalingConfiguration.spare');
      }
      const before = minimumOf(specs);
      Object.assign(spec, body);
      await assertWithinQuota(principal.ncaId, row.version_id, before, minimumOf(specs));
      await saveSpecs(row, specs);
      return spec;
    },

    /**
     * Both graceful and immediate removal make the version INACTIVE at once (its waiting requests move to
     * another version or end); `graceful` keeps its instances until their running requests end, on every
     * replica: the drain is stored before the deployment goes, where placement finds it (drains.ts).
     */
    async remove(principal: Principal, functionId: string, versionId: string, options: { graceful: boolean } = { graceful: false }): Promise<FunctionRecord> {
      const row = await requireByVersion(principal, functionId, versionId);
      if (options.graceful) await repo.drains.start(versionId, new Date(now().getTime() + DRAIN_MAX_MS).toISOString());
      else await repo.drains.end(versionId);
      await repo.delete(row.deployment_id);
      await functions.setStatus(versionId, 'INACTIVE');
      changed(versionId);
      return functions.get(principal, functionId, versionId);
    },
  };
}

export type DeploymentsService = ReturnType<typeof createDeploymentsService>;
