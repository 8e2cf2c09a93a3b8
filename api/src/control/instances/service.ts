// Placement and function status: turns deployments into desired instances on clusters, hands each
// connected agent its whole desired set, folds the agents' reports back in, and moves function versions
// through DEPLOYING → ACTIVE → DEGRADING/DEGRADED/ERROR (wire-reference 2).
import { randomUUID } from 'node:crypto';
import { coalesce } from '../../coalesce.ts';
import { parseDuration } from '../../duration.ts';
import type { FunctionInstances } from '../../http/metrics.ts';
import type { Logger } from '../../logger.ts';
import type { Endpoint, InstanceReport, InstanceSpec, ProgressReport } from '../../compute/protocol.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import type { ClustersService } from '../clusters/service.ts';
import type { Gpu } from '../clusters/schema.ts';
import type { DeploymentRow, DeploymentsRepo } from '../deployments/repo.ts';
import type { GpuSpecification, HealthInfo } from '../deployments/schema.ts';
import type { FunctionStatus, Instance } from '../functions/schema.ts';
import { documentOf, type ActiveInstances, type FunctionsService } from '../functions/service.ts';
import type { FunctionsRepo } from '../functions/repo.ts';
import type { RegistryService } from '../registry/service.ts';
import type { InstanceRow, InstancesRepo } from './repo.ts';

/** The control plane's end of one agent link. */
export interface AgentChannel {
  sendDesired(instances: InstanceSpec[]): void;
}

/** A running instance as the invocation plane needs it. */
export interface ReadyInstance {
  instanceId: string;
  versionId: string;
  endpoint: Endpoint;
  maxRequestConcurrency: number;
  gpu: string;
  instanceType: string;
  backend: string;
  region: string;
}

/**
 * Desired instances per GPU specification, set by the autoscaler (autoscaler/plane.ts) in the store. Placement
 * starts and stops instances toward them; without an entry a specification holds its minInstances.
 */
export interface DesiredCounts {
  load(): Promise<Map<string, number>>;
  /** A request waits on a version held at zero: placement starts one instance and records it here. */
  wake(version: { versionId: string; ncaId: string; functionId: string }, gpuSpecId: string, at: string): Promise<void>;
}

export interface InstancesOptions {
  repo: InstancesRepo;
  deployments: DeploymentsRepo;
  functions: FunctionsService;
  functionsRepo: FunctionsRepo;
  clusters: ClustersService;
  registry: RegistryService;
  log: Logger;
  now?: () => Date;
  /** How often placement runs even when nothing prompts it. */
  intervalMs?: number;
  /** Start-up grace when a deployment's configuration does not give startupGracePeriod. */
  defaultStartupGraceMs?: number;
  /** The autoscaler's desired counts; without them a version holds its minimum (see targetsOf). */
  desired?: DesiredCounts;
  /** Without `desired` only: a version woken from zero keeps one instance this long after its last request. */
  idleBeforeZeroMs?: number;
  /** False on API replicas that leave placement to the one replica that runs it (compute.placement). */
  places?: boolean;
}

/** Instances that restarted this often without becoming ready count as failing for ERROR status. */
const CRASH_LOOP_RESTARTS = 3;
const DEFAULT_GRACE_MS = 600_000;
const DEFAULT_IDLE_BEFORE_ZERO_MS = 300_000;

/** Agent states whose report message says why the instance is not running. */
const FAILING = new Set(['FAILED', 'UNHEALTHY', 'RESTARTING']);

const apiStatus: Record<string, Instance['instanceStatus']> = {
  PENDING: 'STARTING', STARTING: 'STARTING', RESTARTING: 'STARTING', RUNNING: 'RUNNING', UNHEALTHY: 'ERRORED',
  FAILED: 'ERRORED', EXITED: 'TERMINATED', STOPPED: 'TERMINATED',
};

export function createInstancesService(options: InstancesOptions) {
  const { repo, log } = options;
  const now = options.now ?? (() => new Date());
  const rows = new Map<string, InstanceRow>();
  const agents = new Map<string, AgentChannel>();
  /** versionId → requests waiting or in flight; a version with demand never scales below one instance. */
  const demand = new Map<string, number>();
  /** versionId → when it last had demand (without an autoscaler: it lingers at one instance that long). */
  const lastDemand = new Map<string, number>();
  /** versionId → desired instances per GPU specification id, as of the last placement round. */
  const targets = new Map<string, Map<string, number>>();
  const readyListeners: ((versionId: string, ready: ReadyInstance[]) => void)[] = [];
  const progressListeners: ((progress: ProgressReport) => void)[] = [];
  /** What each agent was last sent, so unchanged sets are not resent. */
  const lastSent = new Map<string, string>();
  /** GPUs running tasks hold (the task scheduler's count, once wired). */
  let tasksOn: (clusterId: string, gpu: string) => number = () => 0;
  /** Instances holding a streaming session (the session broker's), stopped last when scaling down. */
  let inSession: (instanceId: string) => boolean = () => false;
  let timer: NodeJS.Timeout | undefined;

  function readyOf(versionId: string, specs: Map<string, GpuSpecification>, clusterRows: Map<string, ClusterRow>): ReadyInstance[] {
    const ready: ReadyInstance[] = [];
    for (const row of rows.values()) {
      if (row.version_id !== versionId || row.desired !== 1 || row.state !== 'RUNNING' || !row.endpoint) continue;
      const cluster = clusterRows.get(row.cluster_id);
      ready.push({
        instanceId: row.instance_id, versionId, endpoint: JSON.parse(row.endpoint) as Endpoint,
        maxRequestConcurrency: specs.get(row.gpu_spec_id)?.maxRequestConcurrency ?? 1, gpu: row.gpu, instanceType: row.instance_type,
        backend: cluster?.group_name ?? '', region: cluster?.region ?? '',
      });
    }
    return ready;
  }

  /**
   * Desired instances per GPU specification: the autoscaler's count (else the minimum), within the bounds.
   * A version held at zero with requests waiting gets one instance on its first specification (by
   * preferredOrder) at once, and the autoscaler is told (wake), so it goes back to zero only after its idle
   * window. Without an autoscaler it keeps that instance for idleBeforeZeroMs after its last request.
   */
  async function targetsOf(deployment: DeploymentRow, specs: GpuSpecification[], desired: Map<string, number> | undefined): Promise<Map<string, number>> {
    const out = new Map(specs.map((spec) => [spec.gpuSpecificationId,
      Math.min(spec.maxInstances, Math.max(spec.minInstances, desired?.get(spec.gpuSpecificationId) ?? spec.minInstances))]));
    const waiting = (demand.get(deployment.version_id) ?? 0) > 0;
    const lingering = !options.desired
      && now().getTime() - (lastDemand.get(deployment.version_id) ?? Number.NEGATIVE_INFINITY) < (options.idleBeforeZeroMs ?? DEFAULT_IDLE_BEFORE_ZERO_MS);
    const first = specs.map((spec, index) => ({ spec, index }))
      .sort((a, b) => (a.spec.preferredOrder ?? 100) - (b.spec.preferredOrder ?? 100) || a.index - b.index)[0]?.spec;
    if (first && (waiting || lingering) && [...out.values()].every((count) => count === 0)) {
      out.set(first.gpuSpecificationId, 1);
      if (waiting && options.desired) {
        await options.desired.wake({ versionId: deployment.version_id, ncaId: deployment.nca_id, functionId: deployment.function_id }, first.gpuSpecificationId, now().toISOString())
          .catch((error) => log.warn({ err: error, versionId: deployment.version_id }, 'could not record a wake from zero; the instance starts anyway'));
      }
    }
    return out;
  }

  /** GPUs of a cluster that desired instances hold. */
  function instancesOn(clusterId: string, gpu: string): number {
    return [...rows.values()].filter((row) => row.cluster_id === clusterId && row.gpu === gpu && row.desired === 1).length;
  }

  function capacityLeft(cluster: ClusterRow, gpu: string): number {
    const offered = (JSON.parse(cluster.gpus) as Gpu[]).find((candidate) => candidate.name === gpu);
    if (offered?.capacity === undefined) return Number.POSITIVE_INFINITY;
    return offered.capacity - instancesOn(cluster.id, gpu) - tasksOn(cluster.id, gpu);
  }

  async function place(deployment: DeploymentRow, spec: GpuSpecification): Promise<ClusterRow | undefined> {
    const eligible = (await options.clusters.offering(deployment.nca_id, spec)).filter((cluster) => capacityLeft(cluster, spec.gpu) > 0);
    const load = (cluster: ClusterRow) => [...rows.values()].filter((row) => row.cluster_id === cluster.id && row.desired === 1).length;
    // Connected clusters first, then the least loaded; an instance on a disconnected cluster waits for its agent.
    return eligible.sort((a, b) => Number(agents.has(b.id)) - Number(agents.has(a.id)) || load(a) - load(b))[0];
  }

  async function reconcileOnce() {
    if (options.places === false) return;
    const deployments = await options.deployments.listAll();
    const deployed = new Map(deployments.map((deployment) => [deployment.version_id, deployment]));
    const desired = await options.desired?.load();
    const at = now().toISOString();

    for (const row of [...rows.values()]) {
      // Gone for good: ended after being undesired (or never started), or a session container that
      // exited on its own, which the loop below replaces with a fresh instance.
      const finished = row.desired === 0 ? ['STOPPED', 'FAILED', 'EXITED', 'PENDING'].includes(row.state) : row.state === 'EXITED';
      if (finished) {
        rows.delete(row.instance_id);
        await repo.delete(row.instance_id);
        continue;
      }
      const deployment = deployed.get(row.version_id);
      const specs = deployment ? JSON.parse(deployment.specs) as GpuSpecification[] : [];
      if (row.desired === 1 && !specs.some((spec) => spec.gpuSpecificationId === row.gpu_spec_id)) {
        row.desired = 0;
        await repo.update(row.instance_id, { desired: 0, updated_at: at });
      }
    }

    targets.clear();
    for (const deployment of deployments) {
      const specs = JSON.parse(deployment.specs) as GpuSpecification[];
      const versionTargets = await targetsOf(deployment, specs, desired);
      targets.set(deployment.version_id, versionTargets);
      for (const spec of specs) {
        const mine = [...rows.values()].filter((row) => row.gpu_spec_id === spec.gpuSpecificationId && row.desired === 1);
        const target = versionTargets.get(spec.gpuSpecificationId) ?? 0;
        for (let missing = target - mine.length; missing > 0; missing--) {
          const cluster = await place(deployment, spec);
          if (!cluster) break;
          const row: InstanceRow = {
            instance_id: randomUUID(), nca_id: deployment.nca_id, function_id: deployment.function_id, version_id: deployment.version_id,
            cluster_id: cluster.id, gpu_spec_id: spec.gpuSpecificationId, gpu: spec.gpu, instance_type: spec.instanceType,
            state: 'PENDING', desired: 1, endpoint: null, restarts: 0, message: null, created_at: at, updated_at: at,
          };
          rows.set(row.instance_id, row);
          await repo.insert(row);
        }
        // Scale down: the youngest not-yet-ready instances go first, instances in a session last.
        const excess = mine.length - target;
        if (excess > 0) {
          const rank = (row: InstanceRow) => (row.state !== 'RUNNING' ? 0 : inSession(row.instance_id) ? 2 : 1);
          const victims = mine.sort((a, b) => rank(a) - rank(b) || b.created_at.localeCompare(a.created_at)).slice(0, excess);
          for (const victim of victims) {
            victim.desired = 0;
            await repo.update(victim.instance_id, { desired: 0, updated_at: at });
          }
        }
      }
    }

    await updateStatuses(deployments);
    await pushDesired();
    await announceReady(deployments);
  }

  async function updateStatuses(deployments: DeploymentRow[]) {
    for (const deployment of deployments) {
      const version = await options.functionsRepo.findVersionById(deployment.version_id);
      if (!version) continue;
      const specs = JSON.parse(deployment.specs) as GpuSpecification[];
      const minimum = specs.reduce((sum, spec) => sum + spec.minInstances, 0);
      const target = [...(targets.get(deployment.version_id)?.values() ?? [])].reduce((sum, count) => sum + count, 0);
      const mine = [...rows.values()].filter((row) => row.version_id === deployment.version_id && row.desired === 1);
      const ready = mine.filter((row) => row.state === 'RUNNING').length;
      const failing = mine.length > 0 && ready === 0
        && mine.every((row) => row.state === 'FAILED' || (row.restarts >= CRASH_LOOP_RESTARTS && row.state !== 'STARTING'));
      const next = nextStatus(version.status as FunctionStatus, { minimum, target, ready, failing });
      if (next !== version.status) {
        log.info({ versionId: deployment.version_id, from: version.status, to: next, ready, minimum }, 'function status');
        await options.functions.setStatus(deployment.version_id, next);
      }
    }
  }

  async function specFor(row: InstanceRow, deployment: DeploymentRow | undefined, clusterRows: Map<string, ClusterRow>): Promise<InstanceSpec | undefined> {
    const version = await options.functionsRepo.findVersionById(row.version_id);
    if (!version || !deployment) return undefined;
    const fn = documentOf(version);
    const gpuSpec = (JSON.parse(deployment.specs) as GpuSpecification[]).find((spec) => spec.gpuSpecificationId === row.gpu_spec_id);
    const grace = typeof gpuSpec?.configuration?.startupGracePeriod === 'string' ? parseDuration(gpuSpec.configuration.startupGracePeriod) : undefined;
    const imageHost = fn.containerImage?.includes('/') ? fn.containerImage.split('/')[0] : undefined;
    const registrySecret = imageHost && imageHost.includes('.') ? await options.registry.secretFor(row.nca_id, imageHost) : undefined;
    return {
      instanceId: row.instance_id, ncaId: row.nca_id, functionId: row.function_id, functionVersionId: row.version_id,
      functionName: fn.name, functionType: fn.functionType, gpu: row.gpu, instanceType: row.instance_type,
      backend: clusterRows.get(row.cluster_id)?.group_name ?? '',
      containerImage: fn.containerImage, containerArgs: fn.containerArgs, containerEnvironment: fn.containerEnvironment ?? [],
      secrets: await options.functions.secretsOf(row.version_id),
      inferenceUrl: fn.inferenceUrl, inferencePort: fn.inferencePort, health: fn.health,
      startupGracePeriodMs: grace ?? options.defaultStartupGraceMs ?? DEFAULT_GRACE_MS,
      ...(registrySecret && imageHost ? { registryAuth: { hostname: imageHost, secret: registrySecret } } : {}),
    };
  }

  async function desiredFor(clusterId: string): Promise<InstanceSpec[]> {
    const deployed = new Map((await options.deployments.listAll()).map((deployment) => [deployment.version_id, deployment]));
    const clusterRows = new Map((await options.clusters.all()).map((cluster) => [cluster.id, cluster]));
    const specs: InstanceSpec[] = [];
    for (const row of rows.values()) {
      if (row.cluster_id !== clusterId || row.desired !== 1) continue;
      const spec = await specFor(row, deployed.get(row.version_id), clusterRows);
      if (spec) specs.push(spec);
    }
    return specs;
  }

  async function pushDesired(force?: string) {
    for (const [clusterId, channel] of agents) {
      const desired = await desiredFor(clusterId);
      const fingerprint = desired.map((spec) => spec.instanceId).join(',');
      if (force !== clusterId && lastSent.get(clusterId) === fingerprint) continue;
      lastSent.set(clusterId, fingerprint);
      channel.sendDesired(desired);
    }
  }

  async function announceReady(deployments: DeploymentRow[]) {
    const clusterRows = new Map((await options.clusters.all()).map((cluster) => [cluster.id, cluster]));
    const versions = new Set([...deployments.map((deployment) => deployment.version_id), ...[...rows.values()].map((row) => row.version_id)]);
    for (const versionId of versions) {
      const deployment = deployments.find((candidate) => candidate.version_id === versionId);
      const specs = new Map((deployment ? JSON.parse(deployment.specs) as GpuSpecification[] : []).map((spec) => [spec.gpuSpecificationId, spec]));
      const ready = readyOf(versionId, specs, clusterRows);
      for (const listener of readyListeners) listener(versionId, ready);
    }
  }

  /** Runs placement now, or right after the run in progress; never two at once. */
  const reconcile = coalesce(reconcileOnce, (error) => log.error({ err: error }, 'placement failed; retrying on the next round'));

  const activeInstances: ActiveInstances = {
    async of(versionIds) {
      const wanted = new Set(versionIds);
      const clusterRows = new Map((await options.clusters.all()).map((cluster) => [cluster.id, cluster]));
      const byVersion = new Map<string, Instance[]>();
      for (const row of rows.values()) {
        if (!wanted.has(row.version_id) || row.desired !== 1) continue;
        const list = byVersion.get(row.version_id) ?? [];
        list.push({
          instanceId: row.instance_id, functionId: row.function_id, functionVersionId: row.version_id, instanceType: row.instance_type,
          instanceStatus: apiStatus[row.state] ?? 'STARTING', ncaId: row.nca_id, gpu: row.gpu,
          backend: clusterRows.get(row.cluster_id)?.group_name ?? '', location: clusterRows.get(row.cluster_id)?.name,
          instanceCreatedAt: row.created_at, instanceUpdatedAt: row.updated_at,
        });
        byVersion.set(row.version_id, list);
      }
      return byVersion;
    },
  };

  return {
    activeInstances,

    /** Why instances of a version are not running, for its deployment's healthInfo: each failing one's last reason. */
    async healthInfo(versionId: string): Promise<HealthInfo[]> {
      const failing = [...rows.values()].filter((row) => row.version_id === versionId && row.desired === 1 && row.message && FAILING.has(row.state));
      if (!failing.length) return [];
      const clusterRows = new Map((await options.clusters.all()).map((cluster) => [cluster.id, cluster]));
      return failing.map((row) => ({
        gpu: row.gpu, backend: clusterRows.get(row.cluster_id)?.group_name ?? '', instanceType: row.instance_type, error: row.message!,
      }));
    },

    /** Instances per version placement holds now (metrics: svc_function_instances). */
    instanceCounts(): FunctionInstances[] {
      const byVersion = new Map<string, FunctionInstances>();
      for (const row of rows.values()) {
        if (row.desired !== 1) continue;
        let counts = byVersion.get(row.version_id);
        if (!counts) byVersion.set(row.version_id, counts = { ncaId: row.nca_id, functionId: row.function_id, versionId: row.version_id, running: 0, starting: 0 });
        if (row.state === 'RUNNING') counts.running++;
        else counts.starting++;
      }
      return [...byVersion.values()];
    },

    instancesOn,

    /** Functions and tasks share GPUs: placement leaves room for what tasks hold. */
    countTasks(count: (clusterId: string, gpu: string) => number) {
      tasksOn = count;
    },

    /** Scaling down spares instances in a streaming session while idle ones can go. */
    keepSessions(holding: (instanceId: string) => boolean) {
      inSession = holding;
    },

    async start() {
      // What agents said before this process started is stale: no instance counts as running (or gets
      // requests) until its agent reports it again, which a reconnecting agent does in its hello.
      for (const row of await repo.listAll()) rows.set(row.instance_id, { ...row, state: 'PENDING' });
      await reconcile();
      if (options.places === false) return;
      timer = setInterval(() => void reconcile(), options.intervalMs ?? 2000);
      timer.unref();
    },

    stop() {
      clearInterval(timer);
      return reconcile.settled();
    },

    reconcile,

    onReady(listener: (versionId: string, ready: ReadyInstance[]) => void) {
      readyListeners.push(listener);
    },

    onProgress(listener: (progress: ProgressReport) => void) {
      progressListeners.push(listener);
    },

    /**
     * The invocation plane's count of waiting and running requests for a version. Called on every
     * request, so it only prompts placement when a version with work has no instance at all.
     */
    setDemand(versionId: string, count: number) {
      if (count === 0) {
        demand.delete(versionId);
        return;
      }
      demand.set(versionId, count);
      lastDemand.set(versionId, now().getTime());
      const placed = [...rows.values()].some((row) => row.version_id === versionId && row.desired === 1);
      if (!placed) void reconcile();
    },

    /** Stops an instance and lets placement start a fresh one in its place (a session ended by sign-out). */
    async retire(instanceId: string) {
      const row = rows.get(instanceId);
      if (!row || row.desired === 0) return;
      row.desired = 0;
      await repo.update(instanceId, { desired: 0, updated_at: now().toISOString() });
      await reconcile();
    },

    async agentConnected(cluster: ClusterRow, channel: AgentChannel, hello: { gpus: Gpu[]; instances: InstanceReport[] }) {
      const previous = agents.get(cluster.id);
      agents.set(cluster.id, channel);
      lastSent.delete(cluster.id);
      if (previous && previous !== channel) log.info({ clusterId: cluster.id }, 'agent reconnected; the older link is dropped');
      await options.clusters.recordAgentContact(cluster.id, hello.gpus);
      for (const report of hello.instances) await applyReport(cluster.id, report);
      await reconcile();
      await pushDesired(cluster.id);
    },

    agentDisconnected(clusterId: string, channel: AgentChannel) {
      if (agents.get(clusterId) === channel) {
        agents.delete(clusterId);
        lastSent.delete(clusterId);
      }
    },

    async report(clusterId: string, report: InstanceReport) {
      if (await applyReport(clusterId, report)) await reconcile();
    },

    progress(clusterId: string, progress: ProgressReport) {
      const row = rows.get(progress.instanceId);
      if (row?.cluster_id !== clusterId) return;
      for (const listener of progressListeners) listener(progress);
    },
  };

  /** Folds one agent report into the row it concerns; reports about unknown instances are ignored. */
  async function applyReport(clusterId: string, report: InstanceReport): Promise<boolean> {
    const row = rows.get(report.instanceId);
    if (!row || row.cluster_id !== clusterId) return false;
    const endpoint = report.endpoint ? JSON.stringify(report.endpoint) : row.endpoint;
    if (row.state === report.state && row.restarts === report.restarts && row.endpoint === endpoint) return false;
    const changes = { state: report.state, restarts: report.restarts, endpoint, message: report.message ?? null, updated_at: now().toISOString() };
    Object.assign(row, changes);
    await repo.update(row.instance_id, changes);
    if (report.state === 'FAILED' || report.state === 'UNHEALTHY') {
      log.warn({ instanceId: row.instance_id, state: report.state, message: report.message }, 'instance not healthy');
    }
    return true;
  }
}

/**
 * The status lifecycle: DEPLOYING until ready ≥ minimum (and ≥ 1 when any instance is wanted); then
 * ACTIVE, DEGRADING below the minimum, DEGRADED at zero ready; ERROR when every wanted instance fails.
 * With minInstances 0, zero ready is a normal state (scaled to zero, or waking for a queued request), so
 * such a version stays ACTIVE and keeps taking requests while its instances start.
 */
export function nextStatus(current: FunctionStatus, facts: { minimum: number; target: number; ready: number; failing: boolean }): FunctionStatus {
  const { minimum, target, ready, failing } = facts;
  if (failing) return 'ERROR';
  const satisfied = ready >= minimum && (target === 0 || ready > 0 || minimum === 0);
  if (current === 'INACTIVE' || current === 'DEPLOYING') return satisfied ? 'ACTIVE' : 'DEPLOYING';
  if (satisfied) return 'ACTIVE';
  if (current === 'ERROR') return ready > 0 ? 'DEGRADING' : 'ERROR';
  return ready === 0 ? 'DEGRADED' : 'DEGRADING';
}

export type InstancesService = ReturnType<typeof createInstancesService>;
