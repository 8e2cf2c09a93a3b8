// /v3/openapi is a valid OpenAPI 3.1 document that lists every endpoint with its access rule. (Every
// response body in the suite is also checked against it by the test platform helper.)
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import SwaggerParser from '@apidevtools/swagger-parser';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

describe('/v3/openapi', () => {
  let svc: TestPlatform;
  before(async () => {
    svc = await startTestPlatform();
  });
  after(() => svc.close());

  for (const host of ['api', 'keys'] as const) {
    test(`the ${host} host's document passes an OpenAPI validator`, async () => {
      const document = (await svc[host]('GET', '/v3/openapi')).body;
      const validated = await SwaggerParser.validate(structuredClone(document));
      assert.equal((validated as { openapi?: string }).openapi, '3.1.0');
      for (const [path, methods] of Object.entries(document.paths as Record<string, Record<string, any>>)) {
        for (const [method, operation] of Object.entries(methods)) {
          assert.ok(operation.operationId && operation.summary, `${method} ${path} has an id and a summary`);
          assert.ok(operation.responses.default, `${method} ${path} documents its problem responses`);
          if (operation.security.length > 0) assert.ok(Array.isArray(operation['x-svc-credentials']), `${method} ${path} names its credentials`);
        }
      }
    });
  }

  test('every endpoint of the spec that exists so far is documented with its scopes', async () => {
    const paths = (await svc.api('GET', '/v3/openapi')).body.paths;
    const expected: [string, string, string[]][] = [
      ['get', '/v2/svc/functions', ['list_functions', 'list_functions_details']],
      ['post', '/v2/svc/functions', ['register_function']],
      ['get', '/v2/svc/functions/ids', ['list_functions', 'list_functions_details']],
      ['get', '/v2/svc/functions/{functionId}/versions', ['list_functions', 'list_functions_details']],
      ['post', '/v2/svc/functions/{functionId}/versions', ['register_function']],
      ['get', '/v2/svc/functions/{functionId}/versions/{functionVersionId}', ['list_functions', 'list_functions_details']],
      ['put', '/v2/svc/functions/{functionId}/versions/{functionVersionId}', ['update_function']],
      ['delete', '/v2/svc/functions/{functionId}/versions/{functionVersionId}', ['delete_function']],
      ['put', '/v2/svc/metadata/functions/{functionId}/versions/{functionVersionId}', ['update_function']],
      ['put', '/v2/svc/secrets/functions/{functionId}/versions/{functionVersionId}', ['update_secrets']],
      ...(['get', 'post', 'put', 'delete'].map((method) => [method, '/v2/svc/deployments/functions/{functionId}/versions/{functionVersionId}', ['deploy_function']]) as [string, string, string[]][]),
      ['get', '/v2/svc/deployments/{deploymentId}', ['deploy_function']],
      ['patch', '/v2/svc/deployments/{deploymentId}/gpu-specifications/{gpuSpecId}', ['deploy_function']],
      ['get', '/v2/svc/registry-credentials', ['manage_registry_credentials']],
      ['post', '/v2/svc/registry-credentials', ['manage_registry_credentials']],
      ['get', '/v2/svc/registry-credentials/{registryCredentialId}', ['manage_registry_credentials']],
      ['patch', '/v2/svc/registry-credentials/{registryCredentialId}', ['manage_registry_credentials']],
      ['delete', '/v2/svc/registry-credentials/{registryCredentialId}', ['manage_registry_credentials']],
      ['get', '/v2/svc/recognized-registries', ['manage_registry_credentials']],
      ['get', '/v2/svc/telemetries', ['manage_telemetries']],
      ['post', '/v2/svc/telemetries', ['manage_telemetries']],
      ['get', '/v2/svc/telemetries/{telemetryId}', ['manage_telemetries']],
      ['delete', '/v2/svc/telemetries/{telemetryId}', ['manage_telemetries']],
      ['get', '/v1/accounts/{ncaId}/clusters', ['cluster-management']],
      ['post', '/v1/accounts/{ncaId}/clusters', ['cluster-management']],
      ['get', '/v1/accounts/{ncaId}/clusters/{clusterId}', ['cluster-management']],
      ['put', '/v1/accounts/{ncaId}/clusters/{clusterId}', ['cluster-management']],
      ['delete', '/v1/accounts/{ncaId}/clusters/{clusterId}', ['cluster-management']],
      ['get', '/v1/accounts/{ncaId}/clusterVersions', ['cluster-management']],
      ['get', '/v2/svc/accounts/{ncaId}', ['account_setup']],
      ['patch', '/v2/svc/accounts/{ncaId}', ['account_setup']],
    ];
    for (const [method, path, scopes] of expected) {
      assert.deepEqual(paths[path]?.[method]?.['x-svc-scopes'], scopes, `${method} ${path}`);
    }
    assert.deepEqual(paths['/v1/accounts/{ncaId}/clusters'].get['x-svc-credentials'], ['token']);
  });
});
