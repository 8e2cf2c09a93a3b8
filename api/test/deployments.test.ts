// Deployments, registry credentials, clusters and cluster groups (wire-reference 3, 4, 6; spec 4.3).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { echoBody, localSpec, streamingBody } from './helpers/fixtures.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

describe('deployments', () => {
  let svc: TestPlatform;
  let token: string;
  let names = 0;

  async function newVersion() {
    const response = await svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name: `dep-${names++}` }) });
    const fn = response.body.function;
    return { fn, path: `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}` };
  }

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
  });
  after(() => svc.close());

  test('deploying moves the version to DEPLOYING; the deployment is readable by version and by id', async () => {
    const { fn, path } = await newVersion();
    const created = await svc.api('POST', path, { bearer: token, body: { deploymentSpecifications: [localSpec()] } });
    assert.equal(created.status, 200);
    const deployment = created.body.deployment;
    assert.equal(deployment.functionStatus, 'DEPLOYING');
    assert.equal(deployment.functionName, fn.name);
    assert.equal(deployment.deploymentSpecifications[0].maxRequestConcurrency, 1, 'default concurrency');
    assert.match(deployment.deploymentSpecifications[0].gpuSpecificationId, /^[0-9a-f-]{36}$/);
    assert.deepEqual((await svc.api('GET', path, { bearer: token })).body.deployment, deployment);
    assert.deepEqual((await svc.api('GET', `/v2/svc/deployments/${deployment.deploymentId}`, { bearer: token })).body.deployment, deployment);
    const version = await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token });
    assert.equal(version.body.function.status, 'DEPLOYING');
    assert.equal((await svc.api('POST', path, { bearer: token, body: { deploymentSpecifications: [localSpec()] } })).status, 409);
    const busy = await svc.api('DELETE', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token });
    assert.equal(busy.status, 409, 'a deployed version cannot be deleted');
  });

  test('validation: bounds, concurrency, GPU offering, clusters, autoscaling', async () => {
    const { path } = await newVersion();
    const cases: [string, Record<string, unknown>][] = [
      ['deploymentSpecifications', { deploymentSpecifications: [] }],
      ['deploymentSpecifications.0.minInstances', { deploymentSpecifications: [localSpec({ minInstances: -1 })] }],
      ['deploymentSpecifications.0.maxInstances', { deploymentSpecifications: [localSpec({ maxInstances: 0, minInstances: 0 })] }],
      ['deploymentSpecifications.0.maxInstances', { deploymentSpecifications: [localSpec({ minInstances: 3, maxInstances: 2 })] }],
      ['deploymentSpecifications.0.maxRequestConcurrency', { deploymentSpecifications: [localSpec({ maxRequestConcurrency: 0 })] }],
      ['deploymentSpecifications.0.maxRequestConcurrency', { deploymentSpecifications: [localSpec({ maxRequestConcurrency: 16_385 })] }],
      ['deploymentSpecifications.0.gpu', { deploymentSpecifications: [localSpec({ gpu: 'H100' })] }],
      ['deploymentSpecifications.0.gpu', { deploymentSpecifications: [localSpec({ instanceType: 'NCP.GPU.H100_1x' })] }],
      ['deploymentSpecifications.0.gpu', { deploymentSpecifications: [localSpec({ backend: 'elsewhere' })] }],
      ['deploymentSpecifications.0.clusters', { deploymentSpecifications: [localSpec({ clusters: ['no-such-cluster'] })] }],
      ['deploymentSpecifications.0.preferredOrder', { deploymentSpecifications: [localSpec({ preferredOrder: 100 })] }],
      ['deploymentSpecifications.0.autoscalingConfiguration.scaleUpDetails.factor',
        { deploymentSpecifications: [localSpec({ autoscalingConfiguration: { scaleUpDetails: { factor: 0.5, threshold: 50 } } })] }],
      ['deploymentSpecifications.0.autoscalingConfiguration.scaleDownDetails.factor',
        { deploymentSpecifications: [localSpec({ autoscalingConfiguration: { scaleDownDetails: { factor: 1.5, threshold: 50 } } })] }],
      ['deploymentSpecifications.0.autoscalingConfiguration.scaleUpDetails.stickiness.size',
        { deploymentSpecifications: [localSpec({ autoscalingConfiguration: { scaleUpDetails: { factor: 2, threshold: 50, stickiness: { size: 'PT2H', threshold: 'PT1M' } } } })] }],
      ['deploymentSpecifications.0.autoscalingConfiguration.spare', { deploymentSpecifications: [localSpec({ maxInstances: 2, autoscalingConfiguration: { spare: 3 } })] }],
      ['deploymentSpecifications.0.autoscalingConfiguration.spare', { deploymentSpecifications: [localSpec({ autoscalingConfiguration: { spare: 1 } })] }],
    ];
    for (const [field, body] of cases) {
      const response = await svc.api('POST', path, { bearer: token, body });
      assert.equal(response.status, 400, `${field}: ${response.text}`);
      assert.equal(response.body.errors[0].field, field, JSON.stringify(response.body.errors));
    }
    assert.equal((await svc.api('GET', path, { bearer: token })).status, 404, 'nothing was deployed');
    const named = await svc.api('POST', path, { bearer: token, body: { deploymentSpecifications: [localSpec({ clusters: ['local'], backend: 'svc-local', preferredOrder: 1 })] } });
    assert.equal(named.status, 200, named.text);
  });

  test('PUT changes bounds; PATCH changes bounds and autoscaling only', async () => {
    const { path } = await newVersion();
    const deployment = (await svc.api('POST', path, { bearer: token, body: { deploymentSpecifications: [localSpec()] } })).body.deployment;
    const specId = deployment.deploymentSpecifications[0].gpuSpecificationId;
    const put = await svc.api('PUT', path, { bearer: token, body: { deploymentSpecifications: [{ gpuSpecificationId: specId, minInstances: 0, maxInstances: 4, maxRequestConcurrency: 8 }] } });
    assert.equal(put.status, 200);
    assert.deepEqual(put.body.deployment.deploymentSpecifications.map((s: any) => [s.minInstances, s.maxInstances, s.maxRequestConcurrency]), [[0, 4, 8]]);
    const unmatched = await svc.api('PUT', path, { bearer: token, body: { deploymentSpecifications: [{ gpu: 'H100', minInstances: 0, maxInstances: 1 }] } });
    assert.equal(unmatched.status, 400);

    const patchPath = `/v2/svc/deployments/${deployment.deploymentId}/gpu-specifications/${specId}`;
    const autoscaling = { scaleUpDetails: { factor: 2, threshold: 70, stickiness: { size: 'PT5M', threshold: 'PT1M' } } };
    const patched = await svc.api('PATCH', patchPath, { bearer: token, body: { minInstances: 1, autoscalingConfiguration: autoscaling, autoscalingConfigurationPolicy: 'CUSTOM_CONFIGURATION' } });
    assert.equal(patched.status, 200);
    assert.equal(patched.body.gpuSpecification.minInstances, 1);
    assert.equal(patched.body.gpuSpecification.maxInstances, 4);
    assert.deepEqual(patched.body.gpuSpecification.autoscalingConfiguration, autoscaling);
    for (const body of [{ gpu: 'H100' }, { maxRequestConcurrency: 2 }, { clusters: ['x'] }]) {
      const refused = await svc.api('PATCH', patchPath, { bearer: token, body });
      assert.equal(refused.status, 400, JSON.stringify(body));
      assert.match(refused.body.detail, /only minInstances, maxInstances, autoscalingConfiguration and autoscalingConfigurationPolicy/);
    }
    const inverted = await svc.api('PATCH', patchPath, { bearer: token, body: { minInstances: 9 } });
    assert.equal(inverted.status, 400);
    assert.equal(inverted.body.errors[0].field, 'minInstances');
    assert.equal((await svc.api('PATCH', `/v2/svc/deployments/${deployment.deploymentId}/gpu-specifications/00000000-0000-4000-8000-000000000000`, { bearer: token, body: { minInstances: 1 } })).status, 404);
    const spare = await svc.api('PATCH', patchPath, { bearer: token, body: { autoscalingConfiguration: { spare: 1 } } });
    assert.equal(spare.status, 400, 'spare instances are for STREAMING functions');
    assert.match(spare.body.detail, /only STREAMING functions keep spare instances/);
  });

  test('spare: a STREAMING deployment keeps that many ready instances beyond its sessions, at most maxInstances', async () => {
    const created = await svc.api('POST', '/v2/svc/functions', { bearer: token, body: streamingBody({ name: `dep-stream-${names++}` }) });
    const fn = created.body.function;
    const path = `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`;
    const deployed = await svc.api('POST', path, { bearer: token, body: { deploymentSpecifications: [localSpec({ minInstances: 0, maxInstances: 2, autoscalingConfiguration: { spare: 1 } })] } });
    assert.equal(deployed.status, 200, deployed.text);
    const spec = deployed.body.deployment.deploymentSpecifications[0];
    assert.deepEqual(spec.autoscalingConfiguration, { spare: 1 });
    const patchPath = `/v2/svc/deployments/${deployed.body.deployment.deploymentId}/gpu-specifications/${spec.gpuSpecificationId}`;
    const tooMany = await svc.api('PATCH', patchPath, { bearer: token, body: { autoscalingConfiguration: { spare: 3 } } });
    assert.equal(tooMany.status, 400);
    assert.equal(tooMany.body.errors[0].field, 'autoscalingConfiguration.spare');
    assert.equal((await svc.api('PATCH', patchPath, { bearer: token, body: { autoscalingConfiguration: { spare: 2 } } })).status, 200);
    await svc.api('DELETE', path, { bearer: token });
  });

  test('deleting the deployment (graceful or not) makes the version INACTIVE', async () => {
    for (const graceful of ['true', 'false']) {
      const { fn, path } = await newVersion();
      await svc.api('POST', path, { bearer: token, body: { deploymentSpecifications: [localSpec()] } });
      const removed = await svc.api('DELETE', `${path}?graceful=${graceful}`, { bearer: token });
      assert.equal(removed.status, 200);
      assert.equal(removed.body.function.status, 'INACTIVE');
      assert.equal(removed.body.function.versionId, fn.versionId);
      assert.equal((await svc.api('GET', path, { bearer: token })).status, 404);
    }
    const { path } = await newVersion();
    assert.equal((await svc.api('DELETE', `${path}?graceful=maybe`, { bearer: token })).status, 400);
  });
});

describe('clusters and cluster groups', () => {
  let svc: TestPlatform;
  let token: string;
  let otherToken: string;

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
    await svc.api('POST', '/v2/svc/accounts/other', { bearer: await svc.adminToken(), body: {} });
    otherToken = await svc.token({ ncaId: 'other' });
  });
  after(() => svc.close());

  test('the embedded default registered one local cluster, usable by every account', async () => {
    const clusters = await svc.api('GET', '/v1/accounts/svc-default/clusters', { bearer: token });
    assert.equal(clusters.status, 200);
    assert.deepEqual(clusters.body.map((cluster: { clusterName: string }) => cluster.clusterName), ['local']);
    assert.deepEqual(clusters.body[0].authorizedNCAIds, ['*']);
    const groups = await svc.api('GET', '/v2/svc/clusterGroups', { bearer: otherToken });
    assert.equal(groups.body.clusterGroups[0].name, 'svc-local');
    assert.deepEqual(groups.body.clusterGroups[0].gpus[0].instanceTypes[0], { name: 'LOCAL.CPU_1x', description: 'A process on this machine, no GPU', default: true });
  });

  test('registering returns the agent credential once; the cluster then offers its GPUs to deployments', async () => {
    const registered = await svc.api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token,
      body: { clusterName: 'dc-1', clusterGroupName: 'on-prem', cloudProvider: 'ON-PREM', gpus: [{ name: 'L40S', capacity: 8, instanceTypes: [{ name: 'ONPREM.GPU.L40S_1x', default: true }] }] },
    });
    assert.equal(registered.status, 200);
    assert.match(registered.body.agentCredential, /^svcagent-[A-Za-z0-9_-]{43}$/);
    const cluster = await svc.api('GET', `/v1/accounts/svc-default/clusters/${registered.body.clusterId}`, { bearer: token });
    assert.equal(cluster.body.clusterGroupId, registered.body.clusterGroupId);
    assert.equal(cluster.body.status, 'REGISTERED');
    assert.ok(!cluster.text.includes(registered.body.agentCredential));
    const list = await svc.api('GET', '/v1/accounts/svc-default/clusters', { bearer: token });
    assert.ok(!list.text.includes(registered.body.agentCredential));

    const groups = (await svc.api('GET', '/v2/svc/clusterGroups', { bearer: token })).body.clusterGroups;
    assert.deepEqual(groups.map((group: { name: string }) => group.name).sort(), ['on-prem', 'svc-local']);
    const otherGroups = (await svc.api('GET', '/v2/svc/clusterGroups', { bearer: otherToken })).body.clusterGroups;
    assert.deepEqual(otherGroups.map((group: { name: string }) => group.name), ['svc-local'], 'a private cluster is not offered to other accounts');

    const fn = (await svc.api('POST', '/v2/svc/functions', { bearer: token, body: echoBody({ name: 'on-l40s' }) })).body.function;
    const spec = { gpu: 'L40S', instanceType: 'ONPREM.GPU.L40S_1x', minInstances: 1, maxInstances: 1 };
    const deployed = await svc.api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token, body: { deploymentSpecifications: [spec] } });
    assert.equal(deployed.status, 200, deployed.text);
    const otherFn = (await svc.api('POST', '/v2/svc/functions', { bearer: otherToken, body: echoBody({ name: 'on-l40s' }) })).body.function;
    const refused = await svc.api('POST', `/v2/svc/deployments/functions/${otherFn.id}/versions/${otherFn.versionId}`, { bearer: otherToken, body: { deploymentSpecifications: [spec] } });
    assert.equal(refused.status, 400);
  });

  test('update, versions, delete; duplicates 409; another account 403/404; bad bodies 400', async () => {
    const created = (await svc.api('POST', '/v1/accounts/svc-default/clusters', { bearer: token, body: { clusterName: 'dc-2', clusterGroupName: 'on-prem' } })).body;
    const path = `/v1/accounts/svc-default/clusters/${created.clusterId}`;
    const updated = await svc.api('PUT', path, { bearer: token, body: { clusterDescription: 'rack 4', region: 'eu-west', gpus: [{ name: 'A10G', instanceTypes: [{ name: 'A10G_1x' }] }] } });
    assert.equal(updated.status, 200);
    assert.equal(updated.body.clusterDescription, 'rack 4');
    assert.equal(updated.body.gpus[0].name, 'A10G');
    const versions = await svc.api('GET', '/v1/accounts/svc-default/clusterVersions', { bearer: token });
    assert.deepEqual(versions.body, { clusterVersions: ['0.1.0'], latest: '0.1.0' });
    assert.equal((await svc.api('POST', '/v1/accounts/svc-default/clusters', { bearer: token, body: { clusterName: 'dc-2', clusterGroupName: 'x' } })).status, 409);
    assert.equal((await svc.api('GET', '/v1/accounts/svc-default/clusters', { bearer: otherToken })).status, 403);
    assert.equal((await svc.api('GET', `/v1/accounts/other/clusters/${created.clusterId}`, { bearer: otherToken })).status, 404);
    const bad = await svc.api('POST', '/v1/accounts/svc-default/clusters', { bearer: token, body: { clusterName: 'has space', clusterGroupName: 'g', gpus: [{ name: 'X', instanceTypes: [] }] } });
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.body.errors.map((error: { field: string }) => error.field), ['clusterName', 'gpus.0.instanceTypes']);
    assert.equal((await svc.api('DELETE', path, { bearer: token })).status, 204);
    assert.equal((await svc.api('GET', path, { bearer: token })).status, 404);
  });

  test('cluster endpoints take SVC_TOKEN only, even with the scope', async () => {
    const key = await svc.apiKey(token, ['cluster-management']);
    const response = await svc.api('GET', '/v1/accounts/svc-default/clusters', { bearer: key });
    assert.equal(response.status, 403);
    assert.match(response.body.detail, /accepts SVC_TOKEN/);
  });
});

describe('registry credentials', () => {
  let svc: TestPlatform;
  let token: string;
  const planted = Buffer.from('robot:planted-registry-password').toString('base64');

  before(async () => {
    svc = await startTestPlatform({ config: { api: { accountBootstrap: { limits: { maxRegistryCredentials: 2 } } } } });
    token = await svc.token();
  });
  after(() => svc.close());

  test('create, list, get, patch, delete; the secret never comes back or reaches a log', async () => {
    const created = await svc.api('POST', '/v2/svc/registry-credentials', {
      bearer: token, body: { registryHostname: 'nvcr.io', secret: { name: 'ngc', value: planted }, artifactTypes: ['container', 'HELM'], description: 'NGC' },
    });
    assert.equal(created.status, 200);
    const credential = created.body.registryCredential;
    assert.equal(credential.registryName, 'NGC');
    assert.deepEqual(credential.artifactTypes, ['CONTAINER', 'HELM']);
    assert.equal(credential.provisionedBy, 'USER');
    const path = `/v2/svc/registry-credentials/${credential.registryCredentialId}`;
    const patched = await svc.api('PATCH', path, { bearer: token, body: { artifactTypeEnums: ['MODEL'], secret: { name: 'ngc', value: `${planted}x` } } });
    assert.deepEqual(patched.body.registryCredential.artifactTypes, ['MODEL']);
    const responses = [created, patched, await svc.api('GET', path, { bearer: token }), await svc.api('GET', '/v2/svc/registry-credentials', { bearer: token })];
    for (const response of responses) assert.ok(!response.text.includes(planted));
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.ok(!svc.logs.join('\n').includes(planted));
    assert.equal((await svc.api('DELETE', path, { bearer: token })).status, 204);
    assert.equal((await svc.api('GET', path, { bearer: token })).status, 404);
  });

  test('duplicate names 409, bad input 400, quota with the reference detail, recognised registries', async () => {
    const body = (name: string) => ({ registryHostname: 'registry.example.com:5000', secret: { name, value: 'dXNlcjpwYXNz' } });
    assert.equal((await svc.api('POST', '/v2/svc/registry-credentials', { bearer: token, body: body('one') })).status, 200);
    assert.equal((await svc.api('POST', '/v2/svc/registry-credentials', { bearer: token, body: body('one') })).status, 409);
    assert.equal((await svc.api('POST', '/v2/svc/registry-credentials', { bearer: token, body: body('two') })).status, 200);
    const over = await svc.api('POST', '/v2/svc/registry-credentials', { bearer: token, body: body('three') });
    assert.equal(over.status, 400);
    assert.equal(over.body.detail, "Account 'svc-default': Reached or exceeded the max limit for the number of registry credentials allowed: 2.");
    const bad = await svc.api('POST', '/v2/svc/registry-credentials', { bearer: token, body: { registryHostname: 'not a host', secret: { name: 'x' }, artifactTypes: ['VIDEO'] } });
    assert.deepEqual(bad.body.errors.map((error: { field: string }) => error.field).sort(), ['artifactTypes.0', 'registryHostname', 'secret.value']);
    const recognized = await svc.api('GET', '/v2/svc/recognized-registries', { bearer: token });
    assert.ok(recognized.body.recognizedRegistries.CONTAINER.some((registry: { hostname: string }) => registry.hostname === 'nvcr.io'));
  });
});
