// Where one more instance goes, or why it cannot go anywhere (placement's own words), and which
// instances go first when a specification has too many. Pure: the counts come from the caller.
import type { NodeRow } from '../clusters/nodes.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import { offers } from '../clusters/service.ts';
import type { GpuSpecification } from '../deployments/schema.ts';
import type { InstanceRow } from './repo.ts';

/** What the choice needs to know of the clusters' use. */
export interface ClusterUse {
  /** GPUs of this kind the cluster's instances and tasks hold. */
  held(clusterId: string, gpu: string): number;
  /** Instances the cluster holds, of any GPU. */
  load(clusterId: string): number;
  /** Some node of the cluster has a live agent link. */
  connected(clusterId: string): boolean;
  /** GPUs of this kind the cluster offers: its live nodes' sum, else its declaration (see leases.ts). */
  capacity(cluster: ClusterRow, gpu: string): number;
}

export interface Quota {
  held: number;
  limit: number;
}

/** GPUs of this kind the cluster offers (unbounded when it declares no capacity). */
export function capacityOf(cluster: ClusterRow, gpu: string): number {
  return cluster.gpus.find((candidate) => candidate.name === gpu)?.capacity ?? Number.POSITIVE_INFINITY;
}

/** GPUs of this kind the node detected; unbounded when it says no count (the cluster's capacity bounds it). */
export function nodeCapacity(node: NodeRow, gpu: string): number {
  return node.gpus.find((offer) => offer.name === gpu)?.capacity ?? Number.POSITIVE_INFINITY;
}

/**
 * A cluster with room for one more instance of `spec`, or why there is none: the account is at its
 * maxInstancesAllowed, no usable cluster offers the GPU, or every one that does is full. Connected
 * clusters come first, then the least loaded; an instance on a cluster without a linked node waits for one
 * (its node is chosen by nodeFor, now or once a node links).
 */
export function chooseCluster(ncaId: string, spec: GpuSpecification, clusters: ClusterRow[], use: ClusterUse, quota: Quota): ClusterRow | string {
  if (quota.held >= quota.limit) return `account quota: ${quota.held} of ${quota.limit} instances in use (maxInstancesAllowed)`;
  const offering = clusters.filter((cluster) => offers(ncaId, spec, cluster));
  if (offering.length === 0) return `no cluster the account may use offers GPU ${spec.gpu} with instance type ${spec.instanceType}`;
  const eligible = offering.filter((cluster) => use.capacity(cluster, spec.gpu) - use.held(cluster.id, spec.gpu) > 0);
  if (eligible.length === 0) {
    const usage = (cluster: ClusterRow) => `${spec.gpu} on cluster ${cluster.name}: ${use.held(cluster.id, spec.gpu)} of ${use.capacity(cluster, spec.gpu)} in use`;
    return `no capacity: ${offering.map(usage).join('; ')}`;
  }
  return eligible.sort((a, b) => Number(use.connected(b.id)) - Number(use.connected(a.id)) || use.load(a.id) - use.load(b.id))[0];
}

/** The `excess` instances to stop: not yet ready ones first, then idle ones, those in a session last; the youngest first within each. */
export function victimsOf(instances: InstanceRow[], excess: number, inSession: (instanceId: string) => boolean): InstanceRow[] {
  const rank = (row: InstanceRow) => (row.state !== 'RUNNING' ? 0 : inSession(row.instance_id) ? 2 : 1);
  return [...instances].sort((a, b) => rank(a) - rank(b) || b.created_at.localeCompare(a.created_at)).slice(0, Math.max(0, excess));
}

/** What choosing a node within a cluster needs to know. */
export interface NodeUse {
  /** Nodes of the cluster whose agent is linked now. */
  linked(clusterId: string): NodeRow[];
  /** Desired instances on the node, of one GPU when given. */
  countOn(nodeId: string, gpu?: string): number;
}

/**
 * The linked node of the cluster with the most room for one more instance of `gpu` (spreading a
 * cluster's instances over its nodes), the least loaded on a tie; null when none has room or none is linked.
 */
export function chooseNode(clusterId: string, gpu: string, use: NodeUse): string | null {
  let best: { id: string; room: number; load: number } | null = null;
  for (const node of use.linked(clusterId)) {
    const room = nodeCapacity(node, gpu) - use.countOn(node.id, gpu);
    const load = use.countOn(node.id);
    if (room <= 0) continue;
    if (!best || room > best.room || (room === best.room && load < best.load)) best = { id: node.id, room, load };
  }
  return best?.id ?? null;
}
