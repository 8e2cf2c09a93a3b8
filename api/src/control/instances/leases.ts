// The nodes placement knows and their leases. Each agent is one node of its cluster (by node name); while
// its link answers, its lease is renewed; a lease that runs out (leaseMs after the last answer) lapses:
// the node's instances are LOST and placed elsewhere. A node whose lease is granted again after a lapse
// gets the next generation, and its agent stops whatever it still runs from before (fencing).
//
// Leases live in this process (the one that runs placement and holds the links) and are mirrored to the
// store (nodes.linked, lease_expires_at) for cluster status on any replica. After this process starts,
// every known node has one lease period to link again before it lapses: a restart of the control plane
// costs no instance.
import type { GpuOffer, LeaseGrant, LeaseHeld } from '../../compute/protocol.ts';
import type { Logger } from '../../logger.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import { MAX_NODES_PER_CLUSTER, type NodeRow, type NodesRepo } from '../clusters/nodes.ts';
import { capacityOf, nodeCapacity } from './choose.ts';

export const DEFAULT_LEASE_MS = 30_000;
/** The node name of an agent that does not say one. */
export const DEFAULT_NODE_NAME = 'default';

interface Lease {
  node: NodeRow;
  /** When it lapses unless renewed (ms). */
  expiresAt: number;
  lapsed: boolean;
  linked: boolean;
  /** When the store's lease_expires_at was last written (ms). */
  writtenAt: number;
}

export interface LeaseOptions {
  repo: NodesRepo;
  leaseMs: number;
  now: () => Date;
  log: Logger;
  /** A lease ran out: its node's instances are lost. */
  onLapse(node: NodeRow): Promise<void>;
}

/** An agent that cannot be a node of its cluster; the hub closes its link saying why. */
export class NodeRefused extends Error {}

export class NodeLeases {
  readonly leaseMs: number;
  readonly #options: LeaseOptions;
  readonly #leases = new Map<string, Lease>();
  #timer: NodeJS.Timeout | undefined;
  readonly #sweepMs: number;
  #sweptAt = 0;

  constructor(options: LeaseOptions) {
    this.#options = options;
    this.leaseMs = options.leaseMs;
    this.#sweepMs = Math.min(1000, Math.max(50, options.leaseMs / 4));
  }

  /** Every known node gets one lease period from now to link again; links are this process's, so none is open yet. */
  async start(): Promise<void> {
    const at = this.#nowMs();
    for (const node of await this.#options.repo.listAll()) {
      if (node.generation === 0) continue;
      this.#leases.set(node.id, { node, expiresAt: at + this.leaseMs, lapsed: false, linked: false, writtenAt: 0 });
      if (node.linked) await this.#options.repo.update(node.id, { linked: 0 });
    }
    this.#sweptAt = at;
    this.#timer = setInterval(() => void this.sweep(), this.#sweepMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /**
   * An agent said hello as node `name` of the cluster: its lease, renewed, or granted anew (next generation)
   * when it had lapsed or never existed. `fenced`: the agent held an older generation and stops all it runs.
   */
  async grant(cluster: ClusterRow, hello: { name: string; held?: LeaseHeld; gpus: GpuOffer[]; agentVersion: string }): Promise<{ grant: LeaseGrant; node: NodeRow; fenced: boolean; renewed: boolean }> {
    const { repo } = this.#options;
    const at = this.#nowMs();
    const node = await repo.register(cluster.id, hello.name, new Date(at).toISOString());
    if (!node) throw new NodeRefused(`cluster '${cluster.name}' already has ${MAX_NODES_PER_CLUSTER} nodes: this one cannot join`);
    const current = this.#leases.get(node.id);
    const renewed = current !== undefined && !current.lapsed && current.expiresAt > at && node.generation > 0;
    const generation = renewed ? node.generation : node.generation + 1;
    const expiresAt = at + this.leaseMs;
    Object.assign(node, { generation, gpus: hello.gpus, agent_version: hello.agentVersion, linked: 1, lease_expires_at: new Date(expiresAt).toISOString() });
    await repo.update(node.id, {
      generation, gpus: hello.gpus, agent_version: hello.agentVersion, linked: 1, lease_expires_at: node.lease_expires_at, updated_at: new Date(at).toISOString(),
    });
    this.#leases.set(node.id, { node, expiresAt, lapsed: false, linked: true, writtenAt: at });
    const fenced = hello.held !== undefined && (hello.held.nodeId !== node.id || hello.held.generation !== generation);
    return { grant: { nodeId: node.id, name: node.name, generation, leaseMs: this.leaseMs }, node, fenced, renewed };
  }

  /** The agent answered over its link: the lease runs on (written to the store twice per period, so the stored one never runs out while it is renewed). */
  renew(nodeId: string): void {
    const lease = this.#leases.get(nodeId);
    if (!lease || lease.lapsed || !lease.linked) return;
    const at = this.#nowMs();
    lease.expiresAt = at + this.leaseMs;
    if (at - lease.writtenAt < this.leaseMs / 2) return;
    lease.writtenAt = at;
    lease.node.lease_expires_at = new Date(lease.expiresAt).toISOString();
    void this.#options.repo.update(nodeId, { lease_expires_at: lease.node.lease_expires_at })
      .catch((error) => this.#options.log.warn({ err: error, nodeId }, 'could not record a lease renewal'));
  }

  /** The node's link closed: it is no longer linked (cluster status says so now); its lease runs out unless it links again. */
  async unlinked(nodeId: string): Promise<void> {
    const lease = this.#leases.get(nodeId);
    if (!lease) return;
    lease.linked = false;
    lease.node.linked = 0;
    await this.#options.repo.update(nodeId, { linked: 0 });
  }

  /**
   * Lapses every lease that ran out. A stall of this process (a blocked event loop) is not held against
   * the agents: their answers wait unread behind it, so their leases are extended by the stall.
   */
  async sweep(): Promise<void> {
    const at = this.#nowMs();
    const stalled = at - this.#sweptAt - this.#sweepMs;
    this.#sweptAt = at;
    if (stalled > this.#sweepMs) for (const lease of this.#leases.values()) lease.expiresAt += stalled;
    for (const lease of this.#leases.values()) {
      if (lease.lapsed || lease.expiresAt > at) continue;
      lease.lapsed = true;
      lease.linked = false;
      lease.node.linked = 0;
      this.#options.log.warn({ nodeId: lease.node.id, node: lease.node.name, clusterId: lease.node.cluster_id }, 'node lease lapsed: its instances are lost');
      try {
        await this.#options.repo.update(lease.node.id, { linked: 0 });
        await this.#options.onLapse(lease.node);
      } catch (error) {
        this.#options.log.error({ err: error, nodeId: lease.node.id }, 'could not handle a lapsed node lease');
      }
    }
  }

  /** Whether the node holds a lease that has not lapsed. */
  leased(nodeId: string): boolean {
    const lease = this.#leases.get(nodeId);
    return lease !== undefined && !lease.lapsed;
  }

  /** Nodes of the cluster whose agent is linked now, oldest first. */
  linkedIn(clusterId: string): NodeRow[] {
    return [...this.#leases.values()].filter((lease) => lease.linked && !lease.lapsed && lease.node.cluster_id === clusterId).map((lease) => lease.node);
  }

  /**
   * GPUs of this kind the cluster offers: the sum of what its leased nodes detected, when any detected
   * this GPU with a count; else what the cluster declares (unbounded when it declares no capacity). None
   * when every node it had has lapsed: nothing new goes where no agent is left to run it.
   */
  capacity(cluster: ClusterRow, gpu: string): number {
    if (this.abandoned(cluster.id)) return 0;
    let sum: number | undefined;
    for (const lease of this.#leases.values()) {
      if (lease.lapsed || lease.node.cluster_id !== cluster.id) continue;
      const count = nodeCapacity(lease.node, gpu);
      if (Number.isFinite(count)) sum = (sum ?? 0) + count;
    }
    return sum ?? capacityOf(cluster, gpu);
  }

  /** The cluster had nodes and every one's lease has lapsed (a cluster no agent ever linked is not). */
  abandoned(clusterId: string): boolean {
    let known = false;
    for (const lease of this.#leases.values()) {
      if (lease.node.cluster_id !== clusterId) continue;
      if (!lease.lapsed) return false;
      known = true;
    }
    return known;
  }

  #nowMs(): number {
    return this.#options.now().getTime();
  }
}
