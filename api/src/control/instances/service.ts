// Placement and function status, composed: a round reads the world (round.ts decides what starts and
// stops), moves function versions through their statuses (status.ts), sends each linked agent its
// desired set when it changed (agents.ts, specs.ts) and announces the ready instances (ready.ts) to the
// invocation plane and the streaming broker. Agents' reports fold back into the instances it holds
// (placed.ts). Rounds run when something changes, and every intervalMs as a backstop.
import { Counter, type Registry } from 'prom-client';
import { coalesce } from '../../coalesce.ts';
import type { GpuOffer, InstanceReport, LeaseGrant, LeaseHeld, ProgressReport } from '../../compute/protocol.ts';
import type { FunctionInstances } from '../../domain/load.ts';
import type { Logger } from '../../logger.ts';
import type { NodeRow, NodesRepo } from '../clusters/nodes.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import type { ClustersService } from '../clusters/service.ts';
import type { DeploymentsRepo } from '../deployments/repo.ts';
import type { FunctionsRepo } from '../functions/repo.ts';
import type { ActiveInstances, FunctionsService } from '../functions/service.ts';
import type { RegistryService } from '../registry/service.ts';
import { AgentLinks, type AgentChannel } from './agents.ts';
import { chooseNode, type ClusterUse, type NodeUse } from './choose.ts';
import { DEFAULT_LEASE_MS, DEFAULT_NODE_NAME, NodeLeases, NodeRefused } from './leases.ts';
import { healthInfoOf, instanceCounts, instancesOf, UnplacedReasons } from './listing.ts';
import { PlacedInstances } from './placed.ts';
import { readyOf, type ReadyInstance } from './ready.ts';
import type { InstancesRepo } from './repo.ts';
import { placeDeployments, type RoundWorld } from './round.ts';
import { createSpecBuilder, type SpecContext } from './specs.ts';
import { updateStatuses } from './status.ts';
import { Demand } from './targets.ts';

export type { AgentChannel } from './agents.ts';
export type { ReadyInstance } from './ready.ts';

/**
 * Desired instances per GPU specification, set by the autoscaler (autoscaler/plane.ts) in the store. Placement
 * starts and stops instances toward them; without an entry a specification holds its minInstances.
 */
export interface DesiredCounts {
  load(): Promise<Map<string, number>>;
  /** A request waits on a version held at zero: placement starts one instance and records it here. */
  wake(version: { versionId: string; ncaId: string; functionId: string }, gpuSpecId: string, at: string): Promise<void>;
}

/** GPUs running tasks hold (the task scheduler's counts). */
export interface TaskCounts {
  tasksOn(clusterId: string, gpu: string): number;
  tasksOnNode(nodeId: string, gpu?: string): number;
}

/** What an agent's hello says, as placement needs it. */
export interface AgentHello {
  /** Node name; absent: DEFAULT_NODE_NAME. */
  node?: string;
  /** The lease it held before this link. */
  lease?: LeaseHeld;
  gpus: GpuOffer[];
  agentVersion: string;
  instances: InstanceReport[];
  unisolated?: string;
}

/** One node's link as the hub holds it: which node of which cluster it speaks for. */
export interface NodeRef {
  id: string;
  clusterId: string;
}

export interface InstancesOptions {
  repo: InstancesRepo;
  nodes: NodesRepo;
  /** How long a node's lease lasts without an answer over its link (compute.agentLeaseMs). */
  leaseMs?: number;
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
  /** The autoscaler's desired counts; without them a version holds its minimum (targets.ts). */
  desired?: DesiredCounts;
  /** Without `desired` only: a version woken from zero keeps one instance this long after its last request. */
  idleBeforeZeroMs?: number;
  /** Where svc_placement_rounds_total is registered. */
  metricsRegistry?: Registry;
  /** Each account's maxInstancesAllowed, read once per round; no entry: no limit. */
  instanceLimits?: () => Promise<Map<string, number>>;
  /** False: placement runs elsewhere until lead() (compute.placement false or 'elected'); start() only mirrors it. */
  places?: boolean;
}

const DEFAULT_IDLE_BEFORE_ZERO_MS = 300_000;

type Listener<T extends unknown[]> = (...args: T) => void;

export class InstancesService {
  readonly #options: InstancesOptions;
  readonly #log: Logger;
  readonly #now: () => Date;
  readonly #placed: PlacedInstances;
  #agents = new AgentLinks();
  #leases: NodeLeases;
  /** Whether this process runs placement now: rounds, leases and agents' hellos only while it does. */
  #leading = false;
  readonly #demand = new Demand();
  /** Versions undeployed gracefully → until when (ISO) their instances wait for their running requests, as the last round read them. */
  #draining = new Map<string, string>();
  readonly #unplaced: UnplacedReasons;
  readonly #desiredSet: ReturnType<typeof createSpecBuilder>;
  readonly #readyListeners: Listener<[string, ReadyInstance[]]>[] = [];
  readonly #knownListeners: Listener<[ReadonlySet<string>]>[] = [];
  readonly #progressListeners: Listener<[ProgressReport]>[] = [];
  readonly #outputListeners: Listener<[InstanceReport]>[] = [];
  readonly #lapseListeners: Listener<[NodeRow]>[] = [];
  readonly #rounds: Counter;
  /** clusterId → its cluster group (the reference's backend), as of the last round. */
  #backends = new Map<string, string>();
  /** GPUs running tasks hold, per cluster and per node (the task scheduler's counts, once wired). */
  #tasks: TaskCounts = { tasksOn: () => 0, tasksOnNode: () => 0 };
  /** Instances holding a streaming session (the session broker's), stopped last when scaling down. */
  #inSession: (instanceId: string) => boolean = () => false;
  #timer: NodeJS.Timeout | undefined;
  /** While placement runs elsewhere: tells it that something changed here (a deployment, a waiting version). */
  #promptElsewhere: () => void = () => {};
  /** Requests running on a version sent by any API replica (the invocation plane's count, once wired). */
  #runningAnywhere: (versionId: string) => number = () => 0;
  /** What choosing a cluster needs to know of the clusters' use: instances and tasks on them, their links. */
  readonly #use: ClusterUse = {
    held: (clusterId, gpu) => this.#placed.countOn(clusterId, gpu) + this.#tasks.tasksOn(clusterId, gpu),
    load: (clusterId) => this.#placed.countOn(clusterId),
    connected: (clusterId) => this.#leases.linkedIn(clusterId).length > 0,
    capacity: (cluster, gpu) => this.#leases.capacity(cluster, gpu),
  };
  readonly #nodeUse: NodeUse = {
    linked: (clusterId) => this.#leases.linkedIn(clusterId),
    countOn: (nodeId, gpu) => this.#placed.countOnNode(nodeId, gpu) + this.#tasks.tasksOnNode(nodeId, gpu),
  };

  constructor(options: InstancesOptions) {
    this.#options = options;
    this.#log = options.log;
    this.#now = options.now ?? (() => new Date());
    this.#placed = new PlacedInstances(options.repo);
    this.#unplaced = new UnplacedReasons(options.log);
    this.#desiredSet = createSpecBuilder(options);
    this.#leases = this.#newLeases();
    this.#rounds = new Counter({ name: 'svc_placement_rounds_total', help: 'Placement rounds run', registers: options.metricsRegistry ? [options.metricsRegistry] : [] });
  }

  /** Runs placement now, or right after the round in progress; never two at once. */
  readonly reconcile = coalesce(() => this.#round(), (error) => this.#log.error({ err: error }, 'placement failed; retrying on the next round'));

  /** GPUs of a cluster that desired instances hold (the task scheduler leaves room for them). */
  readonly instancesOn = (clusterId: string, gpu: string): number => this.#placed.countOn(clusterId, gpu);

  /** Desired instances on a node, of one GPU when given (the task scheduler leaves room for them). */
  readonly instancesOnNode = (nodeId: string, gpu?: string): number => this.#placed.countOnNode(nodeId, gpu);

  /** GPUs of this kind the cluster offers: its leased nodes' sum, else its registration (leases.ts). */
  readonly capacity = (cluster: ClusterRow, gpu: string): number => this.#leases.capacity(cluster, gpu);

  /** Nodes of the cluster whose agent is linked now, oldest first. */
  readonly linkedNodes = (clusterId: string): NodeRow[] => this.#leases.linkedIn(clusterId);

  /** The management API's view: instances of versions, and why a version is not (fully) running. */
  readonly activeInstances: ActiveInstances = {
    healthInfo: (versionId) =>
      healthInfoOf(versionId, this.#unplaced.of(versionId), this.#placed.desired(), (clusterId) => this.#backends.get(clusterId) ?? ''),
    of: async (versionIds) => {
      const clusters = new Map((await this.#options.clusters.all()).map((cluster) => [cluster.id, cluster]));
      return instancesOf(versionIds, this.#placed.desired(), clusters);
    },
  };

  async start(): Promise<void> {
    if (this.#options.places === false) return this.follow();
    await this.#placed.load();
    await this.#lead();
  }

  /** This replica took placement over (compute.placement 'elected'): it carries on from the stored rows. */
  async lead(): Promise<void> {
    clearInterval(this.#timer);
    await this.#placed.adopt();
    await this.#lead();
  }

  async #lead(): Promise<void> {
    this.#leases = this.#newLeases();
    this.#agents = new AgentLinks();
    this.#leading = true;
    // Before the first round, so that it counts the known nodes' capacity and gives them time to link.
    await this.#leases.start();
    await this.reconcile();
    this.#timer = setInterval(() => void this.reconcile(), this.#options.intervalMs ?? 2000);
    this.#timer.unref();
  }

  /**
   * Placement runs elsewhere (from the start, or since this replica's term ended): no more rounds here,
   * and the instances shown are those the placement replica last stored.
   */
  async follow(): Promise<void> {
    this.#leading = false;
    clearInterval(this.#timer);
    this.#leases.stop();
    this.#agents = new AgentLinks();
    await this.reconcile.settled();
    const mirror = () => this.#placed.mirror().catch((error) => this.#log.warn({ err: error }, 'could not read the instances placement stored'));
    await mirror();
    this.#timer = setInterval(() => void mirror(), this.#options.intervalMs ?? 2000);
    this.#timer.unref();
  }

  /** Where a round asked for here goes while placement runs on another replica. */
  /** With several API replicas: what runs on a version through the others too (a graceful undeploy waits for it). */
  countingRunning(running: (versionId: string) => number): void {
    this.#runningAnywhere = running;
  }

  promptingElsewhere(prompt: () => void): void {
    this.#promptElsewhere = prompt;
  }

  stop(): Promise<void> {
    this.#leading = false;
    clearInterval(this.#timer);
    this.#leases.stop();
    return this.reconcile.stop();
  }

  #newLeases(): NodeLeases {
    const { nodes, leaseMs, log } = this.#options;
    return new NodeLeases({ repo: nodes, leaseMs: leaseMs ?? DEFAULT_LEASE_MS, now: this.#now, log, onLapse: (node) => this.#nodeLost(node) });
  }

  /** Instances per version placement holds now (metrics: svc_function_instances). */
  instanceCounts(): FunctionInstances[] {
    return instanceCounts(this.#placed.desired());
  }

  /** Functions and tasks share GPUs: placement leaves room for what tasks hold, on clusters and on nodes. */
  countTasks(tasks: TaskCounts): void {
    this.#tasks = tasks;
  }

  /** Scaling down spares instances in a streaming session while idle ones can go. */
  keepSessions(holding: (instanceId: string) => boolean): void {
    this.#inSession = holding;
  }

  onReady(listener: Listener<[string, ReadyInstance[]]>): void {
    this.#readyListeners.push(listener);
  }

  /** After each round: every version placement still knows (deployed, or holding instances); the rest are gone. */
  onKnown(listener: Listener<[ReadonlySet<string>]>): void {
    this.#knownListeners.push(listener);
  }

  onProgress(listener: Listener<[ProgressReport]>): void {
    this.#progressListeners.push(listener);
  }

  /** Told of each changed report that carries an instance's last lines (its logTail: the agent sends them when it fails). */
  onOutput(listener: Listener<[InstanceReport]>): void {
    this.#outputListeners.push(listener);
  }

  /** A node's lease lapsed (after its instances were marked LOST and its link, if open, was dropped). */
  onNodeLapsed(listener: Listener<[NodeRow]>): void {
    this.#lapseListeners.push(listener);
  }

  /**
   * The invocation plane's count of waiting and running requests for a version. Called on every request,
   * so only a version that starts to wait and has no instance at all prompts a round. Every round reports
   * each version's demand back here (ready → the planes → their demand), so prompting on any count made a
   * version that cannot be placed (a full cluster) chain rounds forever: on SQLite without ever yielding
   * the event loop (issue 15's runaway).
   */
  setDemand(versionId: string, count: number): void {
    if (this.#demand.set(versionId, count, this.#now().getTime()) && !this.#placed.hasVersion(versionId)) void this.reconcile();
    else if (count === 0 && this.#draining.has(versionId)) void this.reconcile(); // drained: its instances may stop
  }

  /** Whether a version undeployed gracefully keeps its instances: while requests run on it, until its deadline. */
  #drains(versionId: string, at: Date): boolean {
    const until = this.#draining.get(versionId);
    if (until === undefined) return false;
    if (Date.parse(until) > at.getTime() && (this.#demand.waiting(versionId) || this.#runningAnywhere(versionId) > 0)) return true;
    this.#endDrain(versionId);
    return false;
  }

  #endDrain(versionId: string): void {
    this.#draining.delete(versionId);
    void this.#options.deployments.drains.end(versionId).catch((error) => this.#log.warn({ err: error, versionId }, 'could not end a drain; the next round tries again'));
  }

  /** Stops an instance and lets placement start a fresh one in its place (a session ended by sign-out). */
  async retire(instanceId: string): Promise<void> {
    const row = this.#placed.get(instanceId);
    if (!this.#leading || !row || row.desired === 0) return;
    await this.#placed.stop(row, this.#now().toISOString());
    await this.reconcile();
  }

  /**
   * An agent said hello: its node is registered (by name, under its cluster) and granted a lease; its link
   * replaces an older one of the same node, its reports are folded in, and the next round sends it its set.
   */
  async agentConnected(cluster: ClusterRow, channel: AgentChannel, hello: AgentHello, greet: (lease: LeaseGrant) => void): Promise<NodeRef> {
    if (!this.#leading) throw new NodeRefused('this replica does not run placement now; link again');
    const { grant, node, renewed } = await this.#leases.grant(cluster, {
      name: hello.node ?? DEFAULT_NODE_NAME, held: hello.lease, gpus: hello.gpus, agentVersion: hello.agentVersion,
    });
    // The welcome goes before any desired set: an agent fenced by it stops what it runs, not what it is sent next.
    greet(grant);
    if (this.#agents.connect(node.id, channel)) this.#log.info({ clusterId: cluster.id, nodeId: node.id }, 'agent reconnected; the older link is dropped');
    this.#log.info({ clusterId: cluster.id, nodeId: node.id, node: node.name, generation: grant.generation, renewed }, 'node lease granted');
    await this.#options.clusters.recordAgentContact(cluster.id, { detected: hello.gpus, unisolated: hello.unisolated ?? null });
    const ref = { id: node.id, clusterId: cluster.id };
    // After a lapse the agent stops what it still runs (fencing): LOST instances it no longer holds are gone.
    if (!renewed) await this.#placed.forgetLost(node.id, new Set(hello.instances.map((report) => report.instanceId)));
    for (const report of hello.instances) await this.#apply(ref, report);
    await this.reconcile();
    return ref;
  }

  /** How long a node's lease lasts without an answer; the hub pings a few times per lease. */
  get leaseMs(): number {
    return this.#leases.leaseMs;
  }

  /** The node's agent answered over its link: its lease runs on. */
  renew(nodeId: string): void {
    if (this.#leading) this.#leases.renew(nodeId);
  }

  agentDisconnected(nodeId: string, channel: AgentChannel): void {
    if (!this.#leading || !this.#agents.disconnect(nodeId, channel)) return;
    void this.#leases.unlinked(nodeId).catch((error) => this.#log.warn({ err: error, nodeId }, 'could not record an agent link closing'));
  }

  async report(node: NodeRef, report: InstanceReport): Promise<void> {
    if (this.#leading && await this.#apply(node, report)) await this.reconcile();
  }

  /** The node that runs an instance (its input assets are staged over that node's link). */
  nodeOf(instanceId: string): string | undefined {
    return this.#placed.get(instanceId)?.node_id ?? undefined;
  }

  /** Whether the node holds an instance of the version (one draining included). */
  holdsVersionOn(nodeId: string, versionId: string): boolean {
    for (const row of this.#placed.all()) if (row.node_id === nodeId && row.version_id === versionId) return true;
    return false;
  }

  progress(clusterId: string, progress: ProgressReport): void {
    if (this.#placed.get(progress.instanceId)?.cluster_id !== clusterId) return;
    for (const listener of this.#progressListeners) listener(progress);
  }

  /** One round: nothing it calls may ask for another unless something changed (see setDemand). */
  async #round(): Promise<void> {
    if (!this.#leading) return this.#promptElsewhere();
    this.#rounds.inc();
    const world = await this.#readWorld();
    const context: SpecContext = {
      deployed: new Map(world.deployments.map((deployment) => [deployment.version_id, deployment])),
      clusters: new Map(world.clusters.map((cluster) => [cluster.id, cluster])),
    };
    this.#backends = new Map(world.clusters.map((cluster) => [cluster.id, cluster.group_name]));
    this.#draining = await this.#options.deployments.drains.list();
    await this.#placed.dropFinished(context.deployed, world.at.toISOString(), (versionId) => this.#drains(versionId, world.at));
    for (const versionId of this.#draining.keys()) if (!this.#placed.hasVersion(versionId)) this.#endDrain(versionId);
    await this.#assignWaiting(world.at.toISOString());
    this.#demand.keepOnly(context.deployed);
    const { desired, idleBeforeZeroMs } = this.#options;
    const outcome = await placeDeployments(world, {
      placed: this.#placed, demand: this.#demand, use: this.#use, inSession: (instanceId) => this.#inSession(instanceId),
      nodeFor: (clusterId, gpu) => chooseNode(clusterId, gpu, this.#nodeUse),
      wake: desired && ((version, gpuSpecId, at) => desired.wake(version, gpuSpecId, at)),
      idleBeforeZeroMs: idleBeforeZeroMs ?? DEFAULT_IDLE_BEFORE_ZERO_MS, log: this.#log,
    });
    this.#unplaced.update(outcome.unplaced);
    await updateStatuses(world.deployments, outcome.targets, this.#placed.index().byVersion, this.#options);
    await this.#agents.push((nodeId) => this.#placed.desiredOnNode(nodeId), (instances) => this.#desiredSet(instances, context));
    this.#announceReady(context);
    // Capped: the next round (after a turn of the event loop) places the rest.
    if (outcome.capped) void this.reconcile();
  }

  async #readWorld(): Promise<RoundWorld> {
    const { deployments, desired, clusters, instanceLimits } = this.#options;
    return {
      deployments: await deployments.listAll(), desired: await desired?.load(), clusters: await clusters.all(),
      limits: await instanceLimits?.(), at: this.#now(),
    };
  }

  /** Tells the listeners each version's ready instances, also versions that just lost their deployment (none). */
  #announceReady(context: SpecContext): void {
    const { byVersion } = this.#placed.index();
    const versions = new Set([...context.deployed.keys(), ...[...this.#placed.all()].map((row) => row.version_id)]);
    for (const versionId of versions) {
      const ready = readyOf(versionId, byVersion.get(versionId) ?? [], context.deployed.get(versionId)?.specs ?? [], context.clusters);
      for (const listener of this.#readyListeners) listener(versionId, ready);
    }
    for (const listener of this.#knownListeners) listener(versions);
  }

  /**
   * Instances placed on a cluster before any node of it had room (or was linked) go to one that has;
   * those waiting on a cluster whose every node has lapsed stop, so that this round places them elsewhere.
   */
  async #assignWaiting(at: string): Promise<void> {
    for (const row of [...this.#placed.unassigned()]) {
      if (this.#leases.abandoned(row.cluster_id)) {
        await this.#placed.stop(row, at);
        continue;
      }
      const nodeId = chooseNode(row.cluster_id, row.gpu, this.#nodeUse);
      if (nodeId) await this.#placed.assign(row, nodeId, at);
    }
  }

  /** A node's lease lapsed: its instances are LOST (no longer routed to) and the round places others. */
  async #nodeLost(node: NodeRow): Promise<void> {
    const lost = await this.#placed.lose(node.id, this.#now().toISOString());
    this.#agents.drop(node.id);
    for (const listener of this.#lapseListeners) listener(node);
    if (lost.length) this.#log.warn({ nodeId: node.id, node: node.name, clusterId: node.cluster_id, instances: lost.length }, 'instances LOST with their node; placing them again');
    await this.reconcile();
  }

  async #apply(node: NodeRef, report: InstanceReport): Promise<boolean> {
    const changed = await this.#placed.apply(node, report, this.#now().toISOString());
    if (changed && (report.state === 'FAILED' || report.state === 'UNHEALTHY')) {
      this.#log.warn({ instanceId: report.instanceId, state: report.state, message: report.message }, 'instance not healthy');
    }
    if (changed && report.logTail?.length) for (const listener of this.#outputListeners) listener(report);
    return changed;
  }
}
