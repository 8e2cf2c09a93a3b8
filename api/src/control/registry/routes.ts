// Registry credential endpoints (scope manage_registry_credentials).
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import {
  createRegistryCredentialSchema, recognizedRegistriesResponse, registryCredentialListResponse, registryCredentialParams,
  registryCredentialResponse, updateRegistryCredentialSchema,
} from './schema.ts';
import type { RegistryService } from './service.ts';

const tag = 'Registry credentials';
const manage = access.functions('manage_registry_credentials');

export function registryRoutes(registry: RegistryService) {
  return [
    route({
      method: 'GET', path: '/v2/svc/registry-credentials', summary: 'List registry credentials', tag, access: manage,
      responses: { 200: { description: 'Registry credentials (never their secrets)', schema: registryCredentialListResponse } },
      handle: async ({ principal }) => ({ body: { registryCredentials: await registry.list(principal) } }),
    }),
    route({
      method: 'POST', path: '/v2/svc/registry-credentials', summary: 'Create a registry credential', tag, access: manage,
      body: createRegistryCredentialSchema,
      responses: { 200: { description: 'The credential', schema: registryCredentialResponse } },
      handle: async ({ principal, body }) => ({ body: { registryCredential: await registry.create(principal, body) } }),
    }),
    route({
      method: 'GET', path: '/v2/svc/registry-credentials/{registryCredentialId}', summary: 'Get a registry credential', tag,
      access: manage, params: registryCredentialParams,
      responses: { 200: { description: 'The credential', schema: registryCredentialResponse } },
      handle: async ({ principal, params }) => ({ body: { registryCredential: await registry.get(principal, params.registryCredentialId) } }),
    }),
    route({
      method: 'PATCH', path: '/v2/svc/registry-credentials/{registryCredentialId}', summary: 'Change a registry credential', tag,
      access: manage, params: registryCredentialParams, body: updateRegistryCredentialSchema,
      responses: { 200: { description: 'The credential', schema: registryCredentialResponse } },
      handle: async ({ principal, params, body }) => ({
        body: { registryCredential: await registry.update(principal, params.registryCredentialId, body) },
      }),
    }),
    route({
      method: 'DELETE', path: '/v2/svc/registry-credentials/{registryCredentialId}', summary: 'Delete a registry credential', tag,
      access: manage, params: registryCredentialParams,
      responses: { 204: { description: 'Deleted' } },
      handle: async ({ principal, params }) => {
        await registry.remove(principal, params.registryCredentialId);
        return { status: 204 };
      },
    }),
    route({
      method: 'GET', path: '/v2/svc/recognized-registries', summary: 'Registries the platform knows how to pull from', tag,
      access: manage,
      responses: { 200: { description: 'By artifact type', schema: recognizedRegistriesResponse } },
      handle: async () => ({ body: { recognizedRegistries: registry.recognizedRegistries() } }),
    }),
  ];
}
