// The instances of a version that take requests, as placement announces them to the invocation plane
// and the streaming broker after every round: running, with the endpoint their agent reported. Only
// desired instances are given here, so LOST ones (their node's lease lapsed) are never routed to.
import type { Endpoint } from '../../compute/protocol.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import type { GpuSpecification } from '../deployments/schema.ts';
import type { InstanceRow } from './repo.ts';

/** A running instance as the invocation plane needs it. */
export interface ReadyInstance {
  instanceId: string;
  versionId: string;
  /** The cluster whose agent runs it (input assets are put in place over its link). */
  clusterId: string;
  /** The node whose agent runs it (its result keeper's key is the node's). */
  nodeId?: string;
  endpoint: Endpoint;
  maxRequestConcurrency: number;
  gpu: string;
  instanceType: string;
  backend: string;
  region: string;
}

export function readyOf(versionId: string, held: InstanceRow[], specs: GpuSpecification[], clusters: Map<string, ClusterRow>): ReadyInstance[] {
  const ready: ReadyInstance[] = [];
  for (const row of held) {
    if (row.state !== 'RUNNING' || !row.endpoint) continue;
    const cluster = clusters.get(row.cluster_id);
    ready.push({
      instanceId: row.instance_id, versionId, clusterId: row.cluster_id, endpoint: row.endpoint, ...(row.node_id ? { nodeId: row.node_id } : {}),
      maxRequestConcurrency: specs.find((spec) => spec.gpuSpecificationId === row.gpu_spec_id)?.maxRequestConcurrency ?? 1,
      gpu: row.gpu, instanceType: row.instance_type, backend: cluster?.group_name ?? '', region: cluster?.region ?? '',
    });
  }
  return ready;
}
