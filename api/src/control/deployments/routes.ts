// Deployment endpoints (scope deploy_function).
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import { functionResponse, versionParams } from '../functions/schema.ts';
import {
  createDeploymentSchema, deleteDeploymentQuery, deploymentIdParams, deploymentResponse, gpuSpecificationResponse, gpuSpecParams,
  patchGpuSpecificationSchema, updateDeploymentSchema,
} from './schema.ts';
import type { DeploymentsService } from './service.ts';

const tag = 'Deployments';
const deploy = access.functions('deploy_function');
const versionPath = '/v2/svc/deployments/functions/{functionId}/versions/{functionVersionId}';

export function deploymentRoutes(deployments: DeploymentsService) {
  return [
    route({
      method: 'GET', path: versionPath, summary: 'Get the deployment of a version', tag, access: deploy, params: versionParams,
      responses: { 200: { description: 'The deployment', schema: deploymentResponse } },
      handle: async ({ principal, params }) => ({
        body: { deployment: await deployments.get(principal, params.functionId, params.functionVersionId) },
      }),
    }),
    route({
      method: 'POST', path: versionPath, summary: 'Deploy a version', tag, access: deploy, params: versionParams, body: createDeploymentSchema,
      responses: { 200: { description: 'The deployment; the version is now DEPLOYING', schema: deploymentResponse } },
      handle: async ({ principal, params, body }) => ({
        body: { deployment: await deployments.create(principal, params.functionId, params.functionVersionId, body) },
      }),
    }),
    route({
      method: 'PUT', path: versionPath, summary: 'Change instance bounds of a deployment', tag, access: deploy, params: versionParams,
      body: updateDeploymentSchema,
      responses: { 200: { description: 'The deployment', schema: deploymentResponse } },
      handle: async ({ principal, params, body }) => ({
        body: { deployment: await deployments.update(principal, params.functionId, params.functionVersionId, body) },
      }),
    }),
    route({
      method: 'DELETE', path: versionPath, summary: 'Undeploy a version (graceful=true drains in-flight requests)', tag, access: deploy,
      params: versionParams, query: deleteDeploymentQuery,
      responses: { 200: { description: 'The version, now INACTIVE', schema: functionResponse } },
      handle: async ({ principal, params, query }) => ({
        body: { function: await deployments.remove(principal, params.functionId, params.functionVersionId, { graceful: query.graceful === 'true' }) },
      }),
    }),
    route({
      method: 'GET', path: '/v2/svc/deployments/{deploymentId}', summary: 'Get a deployment by id', tag, access: deploy,
      params: deploymentIdParams,
      responses: { 200: { description: 'The deployment', schema: deploymentResponse } },
      handle: async ({ principal, params }) => ({ body: { deployment: await deployments.getById(principal, params.deploymentId) } }),
    }),
    route({
      method: 'PATCH', path: '/v2/svc/deployments/{deploymentId}/gpu-specifications/{gpuSpecId}',
      summary: 'Change the instance bounds or autoscaling policy of one GPU specification', tag, access: deploy,
      params: gpuSpecParams, body: patchGpuSpecificationSchema,
      responses: { 200: { description: 'The specification', schema: gpuSpecificationResponse } },
      handle: async ({ principal, params, body }) => ({
        body: { gpuSpecification: await deployments.patchGpuSpecification(principal, params.deploymentId, params.gpuSpecId, body) },
      }),
    }),
  ];
}
