// Self-hosted cluster contracts (spec 4.3; the reference's cluster registration shapes) and cluster
// groups (wire-reference 4).
import { z } from 'zod';
import { parseByteSize } from '../../byte-size.ts';
import { ncaIdSchema } from '../accounts/schema.ts';

const clusterName = z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$/, 'must be 1-63 letters, digits, ., - or _');

export const instanceTypeSchema = z.object({
  name: z.string().min(1).max(128),
  value: z.string().max(128).optional(),
  description: z.string().max(256).optional(),
  default: z.boolean().optional(),
  gpuCount: z.number().int().min(1).max(8).optional(),
  cpuCores: z.number().int().min(1).optional(),
  /** Caps an instance's memory on the agent (docs/security.md); a size such as 64Gi or 16GB. */
  systemMemory: z.string().max(32).refine((value) => parseByteSize(value) !== undefined, 'must be a memory size such as 64Gi, 16GB or 512Mi').optional(),
  gpuMemory: z.string().max(32).optional(),
});

export const gpuSchema = z.object({
  name: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9._-]{0,63}$/, 'must be 1-64 letters, digits, ., - or _'),
  capacity: z.number().int().min(0).optional(),
  instanceTypes: z.array(instanceTypeSchema).min(1, 'must list at least one instance type'),
});

export const cloudProviders = ['ON-PREM', 'AWS', 'AZURE', 'GCP', 'OCI', 'OTHER'] as const;

const clusterFields = {
  clusterGroupName: clusterName,
  clusterDescription: z.string().max(256).optional(),
  authorizedNCAIds: z.array(z.union([ncaIdSchema, z.literal('*')])).max(100).optional(),
  cloudProvider: z.enum(cloudProviders).optional(),
  region: z.string().min(1).max(64).optional(),
  capabilities: z.array(z.string().max(64)).max(32).optional(),
  attributes: z.array(z.string().max(64)).max(32).optional(),
  gpus: z.array(gpuSchema).max(32).optional(),
  nvcaVersion: z.string().max(32).optional(),
};

export const createClusterSchema = z.object({
  clusterName,
  ncaId: ncaIdSchema.optional(),
  ...clusterFields,
});

export const updateClusterSchema = z.object({
  ...clusterFields,
  clusterGroupName: clusterName.optional(),
});

/** One agent of a cluster (agents sharing the cluster's credential are each a node). */
export const clusterNodeSchema = z.object({
  nodeId: z.string(),
  /** The agent's node name (its host name unless configured). */
  name: z.string(),
  /** CONNECTED while its agent link is open and its lease runs. */
  status: z.enum(['CONNECTED', 'DISCONNECTED']),
  /** Grows each time its lease is granted after it lapsed (its instances were LOST and placed elsewhere). */
  generation: z.number().int(),
  /** When its lease ends unless the agent answers over the link. */
  leaseExpiresAt: z.string().optional(),
  agentVersion: z.string(),
  /** GPUs its agent detected. */
  gpus: z.array(z.object({ name: z.string(), capacity: z.number().int().optional() })),
}).meta({ id: 'ClusterNode' });

export const clusterSchema = z.object({
  clusterId: z.string(),
  clusterName: z.string(),
  clusterGroupId: z.string(),
  clusterGroupName: z.string(),
  clusterDescription: z.string().optional(),
  ncaId: z.string(),
  authorizedNCAIds: z.array(z.string()),
  cloudProvider: z.string(),
  region: z.string(),
  capabilities: z.array(z.string()),
  attributes: z.array(z.string()),
  gpus: z.array(gpuSchema),
  nvcaVersion: z.string(),
  status: z.enum(['REGISTERED', 'CONNECTED', 'DISCONNECTED']),
  nvcaLastConnected: z.string().optional(),
  k8sVersion: z.string().optional(),
  /** Its agents, one per node. */
  nodes: z.array(clusterNodeSchema).optional(),
  createdAt: z.string(),
}).meta({ id: 'Cluster' });

export const clusterCreatedSchema = z.object({
  clusterId: z.string(),
  clusterGroupId: z.string(),
  /** What the cluster's agent connects with; shown only in this response. */
  agentCredential: z.string(),
});

export const clusterParams = z.object({ ncaId: ncaIdSchema, clusterId: z.guid('must be a cluster id (UUID)') });
export const accountClusterParams = z.object({ ncaId: ncaIdSchema });

export const clusterGroupSchema = z.object({
  id: z.string(),
  name: z.string(),
  ncaId: z.string(),
  authorizedNcaIds: z.array(z.string()),
  gpus: z.array(z.object({
    name: z.string(),
    instanceTypes: z.array(z.object({ name: z.string(), description: z.string().optional(), default: z.boolean() })),
  })),
  clusters: z.array(z.object({ id: z.string(), name: z.string(), k8sVersion: z.string().optional() })),
}).meta({ id: 'ClusterGroup' });

export const clusterGroupsResponse = z.object({ clusterGroups: z.array(clusterGroupSchema) });
export const clusterVersionsResponse = z.object({ clusterVersions: z.array(z.string()), latest: z.string() });

export type Gpu = z.infer<typeof gpuSchema>;
export type CreateCluster = z.infer<typeof createClusterSchema>;
export type UpdateCluster = z.infer<typeof updateClusterSchema>;
export type Cluster = z.infer<typeof clusterSchema>;
export type ClusterNode = z.infer<typeof clusterNodeSchema>;
export type ClusterGroup = z.infer<typeof clusterGroupSchema>;
