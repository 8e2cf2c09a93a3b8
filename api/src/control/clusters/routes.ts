// Self-hosted cluster endpoints (spec 4.3): SVC_TOKEN with cluster-management only. Cluster groups
// (wire-reference 4) are readable by whoever may list cluster groups or deploy.
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import {
  accountClusterParams, clusterCreatedSchema, clusterGroupsResponse, clusterParams, clusterSchema,
  clusterVersionsResponse, createClusterSchema, updateClusterSchema,
} from './schema.ts';
import { z } from 'zod';
import type { ClustersService } from './service.ts';

const tag = 'Clusters';
const manage = access.tokenOnly('cluster-management');

export function clusterRoutes(clusters: ClustersService) {
  return [
    route({
      method: 'GET', path: '/v1/accounts/{ncaId}/clusters', summary: "List the account's clusters", tag, access: manage,
      params: accountClusterParams,
      responses: { 200: { description: 'Clusters', schema: z.array(clusterSchema) } },
      handle: async ({ principal, params }) => ({ body: await clusters.list(principal, params.ncaId) }),
    }),
    route({
      method: 'POST', path: '/v1/accounts/{ncaId}/clusters', summary: 'Register a cluster', tag, access: manage,
      params: accountClusterParams, body: createClusterSchema,
      responses: { 200: { description: "The cluster's ids and its agent credential (shown once)", schema: clusterCreatedSchema } },
      handle: async ({ principal, params, body }) => ({ body: await clusters.register(principal, params.ncaId, body) }),
    }),
    route({
      method: 'GET', path: '/v1/accounts/{ncaId}/clusters/{clusterId}', summary: 'Get a cluster', tag, access: manage,
      params: clusterParams,
      responses: { 200: { description: 'The cluster', schema: clusterSchema } },
      handle: async ({ principal, params }) => ({ body: await clusters.get(principal, params.ncaId, params.clusterId) }),
    }),
    route({
      method: 'PUT', path: '/v1/accounts/{ncaId}/clusters/{clusterId}', summary: 'Update a cluster', tag, access: manage,
      params: clusterParams, body: updateClusterSchema,
      responses: { 200: { description: 'The updated cluster', schema: clusterSchema } },
      handle: async ({ principal, params, body }) => ({ body: await clusters.update(principal, params.ncaId, params.clusterId, body) }),
    }),
    route({
      method: 'DELETE', path: '/v1/accounts/{ncaId}/clusters/{clusterId}', summary: 'Deregister a cluster', tag, access: manage,
      params: clusterParams,
      responses: { 204: { description: 'Deregistered' } },
      handle: async ({ principal, params }) => {
        await clusters.remove(principal, params.ncaId, params.clusterId);
        return { status: 204 };
      },
    }),
    route({
      method: 'GET', path: '/v1/accounts/{ncaId}/clusterVersions', summary: 'Agent versions this control plane accepts', tag,
      access: manage, params: accountClusterParams,
      responses: { 200: { description: 'Versions', schema: clusterVersionsResponse } },
      handle: async ({ principal, params }) => ({ body: clusters.versions(principal, params.ncaId) }),
    }),
    route({
      method: 'GET', path: '/v2/svc/clusterGroups', summary: 'Cluster groups and GPUs the account may deploy to', tag,
      access: access.functions('list_cluster_groups', 'deploy_function'),
      responses: { 200: { description: 'Cluster groups', schema: clusterGroupsResponse } },
      handle: async ({ principal }) => ({ body: { clusterGroups: await clusters.clusterGroups(principal.ncaId) } }),
    }),
  ];
}
