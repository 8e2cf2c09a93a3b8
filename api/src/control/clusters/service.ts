// Self-hosted clusters (spec 4.3): registration hands out the credential the cluster's agent connects
// with (shown once, stored hashed); cluster groups and GPU offerings are derived from registered clusters.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type { Principal } from '../../domain/principal.ts';
import { conflict, forbidden, notFound } from '../../domain/problem.ts';
import { isUniqueViolation } from '../../store/store.ts';
import { hashSecret } from '../keys/key-format.ts';
import { isLive, type NodeRow, type NodesRepo } from './nodes.ts';
import type { ClusterRow, ClustersRepo } from './repo.ts';
import type { Cluster, ClusterGroup, ClusterNode, CreateCluster, Gpu, UpdateCluster } from './schema.ts';

export const AGENT_VERSION = '0.1.0';
export const AGENT_CREDENTIAL_PREFIX = 'svcagent-';

export function newAgentCredential(): string {
  return AGENT_CREDENTIAL_PREFIX + randomBytes(32).toString('base64url');
}

/** One stable id per (account, group name), so clusters joining a group agree on it without a lookup. */
function groupId(ncaId: string, groupName: string): string {
  const hex = createHash('sha256').update(`${ncaId}/${groupName}`).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-8${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/**
 * Clusters an account may deploy to: its own, and those shared with it or with everyone, unless their
 * agent runs instances without isolation (docs/security.md): those run only their own account's.
 */
export function usableBy(ncaId: string, row: ClusterRow): boolean {
  if (row.nca_id === ncaId) return true;
  return !row.unisolated_reason && (row.authorized_nca_ids.includes('*') || row.authorized_nca_ids.includes(ncaId));
}

export interface GpuRequest {
  gpu: string;
  instanceType: string;
  clusters?: string[];
  backend?: string;
}

/**
 * Whether a cluster can run `request` for the account: usable by it, offering the GPU and instance type,
 * and within `clusters` (names or ids) and `backend` (cluster group name) when given.
 */
export function offers(ncaId: string, request: GpuRequest, row: ClusterRow): boolean {
  return usableBy(ncaId, row)
    && (!request.clusters?.length || request.clusters.includes(row.name) || request.clusters.includes(row.id))
    && (!request.backend || row.group_name === request.backend)
    && row.gpus.some((gpu) => gpu.name === request.gpu && gpu.instanceTypes.some((type) => type.name === request.instanceType));
}

/** GPUs as the cluster offers them now: a count its linked nodes detected replaces the declared one. */
function liveGpus(gpus: Gpu[], live: NodeRow[]): Gpu[] {
  return gpus.map((gpu) => {
    const counts = live.map((node) => node.gpus.find((offer) => offer.name === gpu.name)?.capacity).filter((count) => count !== undefined);
    return counts.length ? { ...gpu, capacity: counts.reduce((sum, count) => sum + count, 0) } : gpu;
  });
}

export function createClustersService(repo: ClustersRepo, nodesRepo: NodesRepo, now: () => Date = () => new Date()) {
  function toNode(node: NodeRow, at: Date): ClusterNode {
    return {
      nodeId: node.id, name: node.name, status: isLive(node, at) ? 'CONNECTED' : 'DISCONNECTED', generation: node.generation,
      agentVersion: node.agent_version, gpus: node.gpus.map(({ name, capacity }) => ({ name, ...(capacity !== undefined ? { capacity } : {}) })),
      ...(node.lease_expires_at ? { leaseExpiresAt: node.lease_expires_at } : {}),
    };
  }

  /**
   * CONNECTED while some node of the cluster has a live agent link (linked, lease running), DISCONNECTED
   * once an agent has been and none is, REGISTERED before any agent came.
   */
  function toCluster(row: ClusterRow, nodes: NodeRow[]): Cluster {
    const at = now();
    const live = nodes.filter((node) => isLive(node, at));
    const connected = live.length > 0 ? true : row.last_connected_at || nodes.length ? false : undefined;
    return {
      clusterId: row.id,
      clusterName: row.name,
      clusterGroupId: row.group_id,
      clusterGroupName: row.group_name,
      ...(row.description ? { clusterDescription: row.description } : {}),
      ncaId: row.nca_id,
      authorizedNCAIds: row.authorized_nca_ids,
      cloudProvider: row.cloud_provider,
      region: row.region,
      capabilities: row.capabilities,
      attributes: row.attributes,
      gpus: liveGpus(row.gpus, live),
      nvcaVersion: row.agent_version,
      status: connected === undefined ? 'REGISTERED' : connected ? 'CONNECTED' : 'DISCONNECTED',
      ...(row.last_connected_at ? { nvcaLastConnected: row.last_connected_at } : {}),
      ...(row.k8s_version ? { k8sVersion: row.k8s_version } : {}),
      nodes: nodes.map((node) => toNode(node, at)),
      createdAt: row.created_at,
    };
  }

  async function withNodes(rows: ClusterRow[]): Promise<Cluster[]> {
    const nodes = rows.length === 1 ? await nodesRepo.listByCluster(rows[0].id) : await nodesRepo.listAll();
    return rows.map((row) => toCluster(row, nodes.filter((node) => node.cluster_id === row.id)));
  }

  /** A token acts only on its own account's clusters. */
  function assertOwnAccount(principal: Principal, ncaId: string) {
    if (principal.ncaId !== ncaId) throw forbidden(`The credential belongs to account '${principal.ncaId}', not '${ncaId}'`);
  }

  async function requireCluster(ncaId: string, id: string): Promise<ClusterRow> {
    const row = await repo.find(ncaId, id);
    if (!row) throw notFound(`Cluster '${id}' does not exist`);
    return row;
  }

  async function insert(ncaId: string, input: CreateCluster): Promise<{ row: ClusterRow; agentCredential: string }> {
    const agentCredential = newAgentCredential();
    const at = now().toISOString();
    const row: ClusterRow = {
      id: randomUUID(), nca_id: ncaId, name: input.clusterName,
      group_id: groupId(ncaId, input.clusterGroupName), group_name: input.clusterGroupName,
      description: input.clusterDescription ?? '', cloud_provider: input.cloudProvider ?? 'ON-PREM', region: input.region ?? 'local',
      authorized_nca_ids: input.authorizedNCAIds ?? [], capabilities: input.capabilities ?? [],
      attributes: input.attributes ?? [], gpus: input.gpus ?? [],
      agent_version: input.nvcaVersion ?? AGENT_VERSION, agent_credential_hash: hashSecret(agentCredential),
      k8s_version: null, last_connected_at: null, unisolated_reason: null, created_at: at, updated_at: at,
    };
    try {
      await repo.insert(row);
    } catch (error) {
      if (isUniqueViolation(error)) throw conflict(`Cluster '${input.clusterName}' already exists in account '${ncaId}'`);
      throw error;
    }
    return { row, agentCredential };
  }

  return {
    /** Whether the node's lease still runs (its link may be down a moment): what it keeps is not lost yet. */
    async nodeLive(nodeId: string): Promise<boolean> {
      const expires = (await nodesRepo.find(nodeId))?.lease_expires_at;
      return expires != null && Date.parse(expires) > now().getTime();
    },
    async register(principal: Principal, ncaId: string, input: CreateCluster) {
      assertOwnAccount(principal, ncaId);
      if (input.ncaId && input.ncaId !== ncaId) throw forbidden(`Body ncaId '${input.ncaId}' does not match the path`);
      const { row, agentCredential } = await insert(ncaId, input);
      return { clusterId: row.id, clusterGroupId: row.group_id, agentCredential };
    },

    /** The embedded default: one local cluster, usable by every account of this installation. */
    registerLocal(ncaId: string, name: string, groupName: string, gpus: Gpu[]) {
      return insert(ncaId, {
        clusterName: name, clusterGroupName: groupName, authorizedNCAIds: ['*'], gpus,
        clusterDescription: 'This machine (embedded default)',
      });
    },

    async list(principal: Principal, ncaId: string): Promise<Cluster[]> {
      assertOwnAccount(principal, ncaId);
      return withNodes(await repo.listByAccount(ncaId));
    },

    async get(principal: Principal, ncaId: string, id: string): Promise<Cluster> {
      assertOwnAccount(principal, ncaId);
      const [cluster] = await withNodes([await requireCluster(ncaId, id)]);
      return cluster;
    },

    async update(principal: Principal, ncaId: string, id: string, input: UpdateCluster): Promise<Cluster> {
      assertOwnAccount(principal, ncaId);
      const row = await requireCluster(ncaId, id);
      const changes: Partial<ClusterRow> = { updated_at: now().toISOString() };
      if (input.clusterGroupName) Object.assign(changes, { group_name: input.clusterGroupName, group_id: groupId(ncaId, input.clusterGroupName) });
      if (input.clusterDescription !== undefined) changes.description = input.clusterDescription;
      if (input.authorizedNCAIds) changes.authorized_nca_ids = input.authorizedNCAIds;
      if (input.cloudProvider) changes.cloud_provider = input.cloudProvider;
      if (input.region) changes.region = input.region;
      if (input.capabilities) changes.capabilities = input.capabilities;
      if (input.attributes) changes.attributes = input.attributes;
      if (input.gpus) changes.gpus = input.gpus;
      if (input.nvcaVersion) changes.agent_version = input.nvcaVersion;
      await repo.update(row.id, changes);
      const [cluster] = await withNodes([{ ...row, ...changes }]);
      return cluster;
    },

    /** Agent versions this control plane accepts (the account's, like every other cluster route). */
    versions(principal: Principal, ncaId: string) {
      assertOwnAccount(principal, ncaId);
      return { clusterVersions: [AGENT_VERSION], latest: AGENT_VERSION };
    },

    async remove(principal: Principal, ncaId: string, id: string): Promise<void> {
      assertOwnAccount(principal, ncaId);
      if (!await repo.delete(ncaId, id)) throw notFound(`Cluster '${id}' does not exist`);
      await nodesRepo.deleteByCluster(id);
    },

    /** GET /v2/svc/clusterGroups: the groups of clusters the account may use, GPUs merged per group. */
    async clusterGroups(ncaId: string): Promise<ClusterGroup[]> {
      const groups = new Map<string, ClusterGroup>();
      for (const row of (await repo.listAll()).filter((candidate) => usableBy(ncaId, candidate))) {
        let group = groups.get(row.group_id);
        if (!group) {
          group = { id: row.group_id, name: row.group_name, ncaId: row.nca_id, authorizedNcaIds: row.authorized_nca_ids, gpus: [], clusters: [] };
          groups.set(row.group_id, group);
        }
        group.clusters.push({ id: row.id, name: row.name, ...(row.k8s_version ? { k8sVersion: row.k8s_version } : {}) });
        for (const gpu of row.gpus) {
          let merged = group.gpus.find((candidate) => candidate.name === gpu.name);
          if (!merged) group.gpus.push(merged = { name: gpu.name, instanceTypes: [] });
          for (const type of gpu.instanceTypes) {
            if (!merged.instanceTypes.some((known) => known.name === type.name)) {
              merged.instanceTypes.push({ name: type.name, ...(type.description ? { description: type.description } : {}), default: type.default ?? false });
            }
          }
        }
      }
      return [...groups.values()];
    },

    /** The clusters able to run `request` for the account (see offers), in registration order. */
    /** Clusters that can run `request` for the account; `ignoringIsolation`: also those whose agent would refuse it for want of a sandbox. */
    async offering(ncaId: string, request: GpuRequest, options: { ignoringIsolation?: boolean } = {}): Promise<ClusterRow[]> {
      return (await repo.listAll()).filter((row) => offers(ncaId, request, options.ignoringIsolation ? { ...row, unisolated_reason: null } : row));
    },

    all: () => repo.listAll(),
    findById: (id: string) => repo.findById(id),

    /**
     * An agent said hello; GPUs it detected join those declared at registration (their counts per node are
     * the nodes' own, control/clusters/nodes.ts), and a hello says whether its instances run without
     * isolation (`unisolated`: why, or null).
     */
    async recordAgentContact(id: string, hello: { detected?: Gpu[]; unisolated?: string | null } = {}): Promise<void> {
      const { detected = [] } = hello;
      const changes: Partial<ClusterRow> = {
        last_connected_at: now().toISOString(), ...(hello.unisolated !== undefined ? { unisolated_reason: hello.unisolated } : {}),
      };
      if (detected.length) {
        const declared = (await repo.findById(id))?.gpus ?? [];
        changes.gpus = [...declared.filter((gpu) => !detected.some((found) => found.name === gpu.name)), ...detected];
      }
      await repo.update(id, changes);
    },

    /** The cluster an agent credential belongs to. */
    authenticateAgent(credential: string): Promise<ClusterRow | undefined> {
      return credential.startsWith(AGENT_CREDENTIAL_PREFIX) ? repo.findByCredentialHash(hashSecret(credential)) : Promise.resolve(undefined);
    },
  };
}

export type ClustersService = ReturnType<typeof createClustersService>;
