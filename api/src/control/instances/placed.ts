// The instances placement holds, in memory and mirrored to the store: one small class keeps the rows
// and answers every count the other parts ask of them, so no part keeps a copy of its own.
import type { InstanceReport } from '../../compute/protocol.ts';
import type { DeploymentRow } from '../deployments/repo.ts';
import type { InstanceRow, InstancesRepo } from './repo.ts';

/** This round's desired instances, grouped as placement reads them. */
export interface HeldIndex {
  bySpec: Map<string, InstanceRow[]>;
  byVersion: Map<string, InstanceRow[]>;
  /** ncaId → instances it holds. */
  perAccount: Map<string, number>;
}

function push<K>(index: Map<K, InstanceRow[]>, key: K, row: InstanceRow) {
  const list = index.get(key);
  if (list) list.push(row);
  else index.set(key, [row]);
}

/** How long a LOST instance is kept (its node may come back and report its end) before it is forgotten. */
const LOST_KEPT_MS = 3_600_000;

/**
 * Gone for good: ended after being undesired (or never started), a session container that exited on its
 * own, or LOST long enough ago that its node is not coming back for it.
 */
function finished(row: InstanceRow, at: string): boolean {
  if (row.state === 'LOST') return Date.parse(at) - Date.parse(row.updated_at) >= LOST_KEPT_MS;
  return row.desired === 0 ? ['STOPPED', 'FAILED', 'EXITED', 'PENDING'].includes(row.state) : row.state === 'EXITED';
}

export class PlacedInstances {
  readonly #rows = new Map<string, InstanceRow>();
  readonly #repo: InstancesRepo;

  constructor(repo: InstancesRepo) {
    this.#repo = repo;
  }

  /**
   * What the store holds. What agents said before this process started is stale: no instance counts as
   * running (or gets requests) until its agent reports it again, which a reconnecting agent does in its hello.
   */
  async load(): Promise<void> {
    for (const row of await this.#repo.listAll()) this.#rows.set(row.instance_id, { ...row, state: 'PENDING' });
  }

  /**
   * What the store holds, endpoints too: a replica taking placement over (compute.placement 'elected')
   * carries on from the rows its predecessor wrote moments ago, so no ready instance drops out meanwhile;
   * the agents' hellos over their new links confirm them.
   */
  async adopt(): Promise<void> {
    const rows = await this.#repo.listStored();
    this.#rows.clear();
    for (const row of rows) this.#rows.set(row.instance_id, row);
  }

  /**
   * What the store holds, as it holds it: on a replica that does not place, whose view of instances is the
   * placement replica's, which writes every report to the store.
   */
  async mirror(): Promise<void> {
    const rows = await this.#repo.listAll();
    this.#rows.clear();
    for (const row of rows) this.#rows.set(row.instance_id, row);
  }

  get(instanceId: string): InstanceRow | undefined {
    return this.#rows.get(instanceId);
  }

  /** Every instance placement still knows, desired or stopping. */
  all(): Iterable<InstanceRow> {
    return this.#rows.values();
  }

  /** Instances placement wants running. */
  *desired(): Iterable<InstanceRow> {
    for (const row of this.#rows.values()) if (row.desired === 1) yield row;
  }

  /** What a node's agent should run. */
  desiredOnNode(nodeId: string): InstanceRow[] {
    return [...this.desired()].filter((row) => row.node_id === nodeId);
  }

  /** Desired instances on a node, of one GPU when given. */
  countOnNode(nodeId: string, gpu?: string): number {
    let count = 0;
    for (const row of this.desired()) if (row.node_id === nodeId && (gpu === undefined || row.gpu === gpu)) count++;
    return count;
  }

  /** Desired instances not yet on a node: they wait for a linked node of their cluster with room. */
  *unassigned(): Iterable<InstanceRow> {
    for (const row of this.desired()) if (row.node_id === null) yield row;
  }

  async assign(row: InstanceRow, nodeId: string, at: string): Promise<void> {
    row.node_id = nodeId;
    await this.#repo.update(row.instance_id, { node_id: nodeId, updated_at: at });
  }

  /**
   * The node's lease lapsed: its instances are LOST, no longer desired there (so never routed to, and
   * stopped by its agent if it comes back), and placement starts others in their place.
   */
  async lose(nodeId: string, at: string): Promise<InstanceRow[]> {
    const lost = [...this.desired()].filter((row) => row.node_id === nodeId);
    for (const row of lost) {
      Object.assign(row, { state: 'LOST', desired: 0, endpoint: null, message: 'its node\'s lease lapsed (the agent stopped answering)', updated_at: at });
      await this.#repo.update(row.instance_id, { state: 'LOST', desired: 0, endpoint: null, message: row.message, updated_at: at });
    }
    return lost;
  }

  /** LOST instances of a node whose agent came back without them: they are gone. */
  async forgetLost(nodeId: string, held: Set<string>): Promise<void> {
    for (const row of [...this.#rows.values()]) {
      if (row.node_id !== nodeId || row.state !== 'LOST' || held.has(row.instance_id)) continue;
      this.#rows.delete(row.instance_id);
      await this.#repo.delete(row.instance_id);
    }
  }

  /** Desired instances on a cluster, of one GPU when given. */
  countOn(clusterId: string, gpu?: string): number {
    let count = 0;
    for (const row of this.desired()) if (row.cluster_id === clusterId && (gpu === undefined || row.gpu === gpu)) count++;
    return count;
  }

  hasVersion(versionId: string): boolean {
    for (const row of this.desired()) if (row.version_id === versionId) return true;
    return false;
  }

  index(): HeldIndex {
    const index: HeldIndex = { bySpec: new Map(), byVersion: new Map(), perAccount: new Map() };
    for (const row of this.desired()) {
      push(index.bySpec, row.gpu_spec_id, row);
      push(index.byVersion, row.version_id, row);
      index.perAccount.set(row.nca_id, (index.perAccount.get(row.nca_id) ?? 0) + 1);
    }
    return index;
  }

  async add(row: InstanceRow): Promise<void> {
    this.#rows.set(row.instance_id, row);
    await this.#repo.insert(row);
  }

  /** The instance should stop: its agent is told with the next desired set. */
  async stop(row: InstanceRow, at: string): Promise<void> {
    row.desired = 0;
    await this.#repo.update(row.instance_id, { desired: 0, updated_at: at });
  }

  /**
   * Instances gone for good leave; those whose specification left their deployment (or that lost it) stop,
   * but for those of a version `draining` (undeployed gracefully, requests still running on it).
   */
  async dropFinished(deployed: Map<string, DeploymentRow>, at: string, draining: (versionId: string) => boolean = () => false): Promise<void> {
    for (const row of [...this.#rows.values()]) {
      if (finished(row, at)) {
        this.#rows.delete(row.instance_id);
        await this.#repo.delete(row.instance_id);
        continue;
      }
      const specs = deployed.get(row.version_id)?.specs ?? [];
      if (row.desired === 1 && !specs.some((spec) => spec.gpuSpecificationId === row.gpu_spec_id) && !draining(row.version_id)) await this.stop(row, at);
    }
  }

  /**
   * Folds one agent report into its row; false when nothing changed or the report is not this node's to
   * give: an instance unknown here, of another cluster or node, or LOST (only its end is taken). An
   * instance of the cluster on no node yet (placed before nodes, or before a node linked) is adopted.
   */
  async apply(node: { id: string; clusterId: string }, report: InstanceReport, at: string): Promise<boolean> {
    const row = this.#rows.get(report.instanceId);
    if (!row || row.cluster_id !== node.clusterId || (row.node_id !== null && row.node_id !== node.id)) return false;
    if (row.state === 'LOST' && !ENDED.has(report.state)) return false;
    const endpoint = report.endpoint ?? row.endpoint;
    const message = report.message ?? null;
    if (row.node_id !== null && row.state === report.state && row.restarts === report.restarts && row.message === message && sameEndpoint(row.endpoint, endpoint)) return false;
    const changes = { state: report.state, restarts: report.restarts, endpoint, message, node_id: node.id, updated_at: at };
    Object.assign(row, changes);
    await this.#repo.update(row.instance_id, changes);
    return true;
  }
}

const ENDED = new Set(['STOPPED', 'FAILED', 'EXITED']);

function sameEndpoint(a: InstanceRow['endpoint'], b: InstanceRow['endpoint']): boolean {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}
