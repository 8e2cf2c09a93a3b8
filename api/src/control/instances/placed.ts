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

/** Gone for good: ended after being undesired (or never started), or a session container that exited on its own. */
function finished(row: InstanceRow): boolean {
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

  desiredOn(clusterId: string): InstanceRow[] {
    return [...this.desired()].filter((row) => row.cluster_id === clusterId);
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
      if (finished(row)) {
        this.#rows.delete(row.instance_id);
        await this.#repo.delete(row.instance_id);
        continue;
      }
      const specs = deployed.get(row.version_id)?.specs ?? [];
      if (row.desired === 1 && !specs.some((spec) => spec.gpuSpecificationId === row.gpu_spec_id) && !draining(row.version_id)) await this.stop(row, at);
    }
  }

  /** Folds one agent report into its row; false when nothing changed or the report is about an instance unknown here. */
  async apply(clusterId: string, report: InstanceReport, at: string): Promise<boolean> {
    const row = this.#rows.get(report.instanceId);
    if (!row || row.cluster_id !== clusterId) return false;
    const endpoint = report.endpoint ?? row.endpoint;
    const message = report.message ?? null;
    if (row.state === report.state && row.restarts === report.restarts && row.message === message && sameEndpoint(row.endpoint, endpoint)) return false;
    const changes = { state: report.state, restarts: report.restarts, endpoint, message, updated_at: at };
    Object.assign(row, changes);
    await this.#repo.update(row.instance_id, changes);
    return true;
  }
}

function sameEndpoint(a: InstanceRow['endpoint'], b: InstanceRow['endpoint']): boolean {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}
