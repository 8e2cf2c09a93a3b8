// Function management endpoints (spec 4.1, 5.3).
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import {
  createFunctionSchema, functionIdsQuery, functionIdsResponse, functionListResponse, functionParams, functionResponse,
  getVersionQuery, listFunctionsQuery, updateFunctionSchema, updateSecretsSchema, versionParams,
} from './schema.ts';
import type { FunctionsService } from './service.ts';

const tag = 'Functions';
const list = access.functions('list_functions', 'list_functions_details');
const register = access.functions('register_function');
const update = access.functions('update_function');

export function functionRoutes(functions: FunctionsService) {
  const updateVersion = (path: string, summary: string) => route({
    method: 'PUT', path, summary, tag, access: update, params: versionParams, body: updateFunctionSchema,
    responses: { 200: { description: 'The version', schema: functionResponse } },
    handle: async ({ principal, params, body }) => ({
      body: { function: await functions.update(principal, params.functionId, params.functionVersionId, body) },
    }),
  });

  return [
    route({
      method: 'GET', path: '/v2/svc/functions', summary: 'List function versions of the account', tag, access: list,
      query: listFunctionsQuery,
      responses: { 200: { description: 'One page, newest first; `cursor` fetches the next', schema: functionListResponse } },
      handle: async ({ principal, query }) => ({ json: await functions.listJson(principal, query) }),
    }),
    route({
      method: 'POST', path: '/v2/svc/functions', summary: 'Create a function and its first version', tag, access: register,
      body: createFunctionSchema,
      responses: { 200: { description: 'The new function version', schema: functionResponse } },
      handle: async ({ principal, body }) => ({ body: { function: await functions.create(principal, body) } }),
    }),
    route({
      method: 'GET', path: '/v2/svc/functions/ids', summary: 'List function ids', tag, access: list, query: functionIdsQuery,
      responses: { 200: { description: 'Function ids', schema: functionIdsResponse } },
      handle: async ({ principal, query }) => ({ body: { functionIds: await functions.ids(principal, query.visibility) } }),
    }),
    route({
      method: 'GET', path: '/v2/svc/functions/{functionId}/versions', summary: 'List the versions of a function', tag, access: list,
      params: functionParams,
      responses: { 200: { description: 'Versions, newest first', schema: functionListResponse } },
      handle: async ({ principal, params }) => ({ body: { functions: await functions.versions(principal, params.functionId) } }),
    }),
    route({
      method: 'POST', path: '/v2/svc/functions/{functionId}/versions', summary: 'Create a version of a function', tag, access: register,
      params: functionParams, body: createFunctionSchema,
      responses: { 200: { description: 'The new version', schema: functionResponse } },
      handle: async ({ principal, params, body }) => ({ body: { function: await functions.createVersion(principal, params.functionId, body) } }),
    }),
    route({
      method: 'GET', path: '/v2/svc/functions/{functionId}/versions/{functionVersionId}', summary: 'Get a function version', tag,
      access: list, params: versionParams, query: getVersionQuery,
      responses: { 200: { description: 'The version; secrets by name only, even with includeSecrets', schema: functionResponse } },
      handle: async ({ principal, params }) => ({ body: { function: await functions.get(principal, params.functionId, params.functionVersionId) } }),
    }),
    updateVersion('/v2/svc/functions/{functionId}/versions/{functionVersionId}', 'Update a function version (tags, rate limit, description)'),
    updateVersion('/v2/svc/metadata/functions/{functionId}/versions/{functionVersionId}', 'Update function version metadata'),
    route({
      method: 'DELETE', path: '/v2/svc/functions/{functionId}/versions/{functionVersionId}', summary: 'Delete a function version', tag,
      access: access.functions('delete_function'), params: versionParams,
      responses: { 204: { description: 'Deleted' } },
      handle: async ({ principal, params }) => {
        await functions.remove(principal, params.functionId, params.functionVersionId);
        return { status: 204 };
      },
    }),
    route({
      method: 'PUT', path: '/v2/svc/secrets/functions/{functionId}/versions/{functionVersionId}', summary: "Set a version's secrets", tag,
      access: access.functions('update_secrets'), params: versionParams, body: updateSecretsSchema,
      responses: { 204: { description: 'Secrets set (values are never returned)' } },
      handle: async ({ principal, params, body }) => {
        await functions.updateSecrets(principal, params.functionId, params.functionVersionId, body.secrets);
        return { status: 204 };
      },
    }),
  ];
}
