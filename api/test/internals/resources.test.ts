import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseByteSize } from '../../src/byte-size.ts';
import { resourcesOf } from '../../src/control/clusters/resources.ts';
import { createClusterSchema } from '../../src/control/clusters/schema.ts';

test('memory sizes in the units people and Kubernetes write', () => {
  assert.equal(parseByteSize('64Gi'), 64 * 2 ** 30);
  assert.equal(parseByteSize('16 GB'), 16e9);
  assert.equal(parseByteSize('512Mi'), 512 * 2 ** 20);
  assert.equal(parseByteSize('1.5G'), 1.5e9);
  assert.equal(parseByteSize('1073741824'), 2 ** 30);
  for (const bad of ['', 'lots', '-1Gi', '0', '12 parsecs', '1e9']) assert.equal(parseByteSize(bad), undefined, bad);
});

test('an instance type grants its cpuCores and systemMemory; one that says nothing grants nothing', () => {
  const gpus = [{ name: 'L40', instanceTypes: [
    { name: 'L40.x1', cpuCores: 4, systemMemory: '32Gi' },
    { name: 'L40.bare' },
  ] }];
  assert.deepEqual(resourcesOf(gpus, 'L40', 'L40.x1'), { cpuCores: 4, memoryBytes: 32 * 2 ** 30 });
  assert.equal(resourcesOf(gpus, 'L40', 'L40.bare'), undefined);
  assert.equal(resourcesOf(gpus, 'A100', 'L40.x1'), undefined);
});

test('a cluster registration refuses a systemMemory the agent could not apply, naming the field', () => {
  const result = createClusterSchema.safeParse({
    clusterName: 'c', clusterGroupName: 'g', gpus: [{ name: 'L40', instanceTypes: [{ name: 't', systemMemory: 'plenty' }] }],
  });
  assert.equal(result.success, false);
  assert.deepEqual(result.error!.issues[0].path, ['gpus', 0, 'instanceTypes', 0, 'systemMemory']);
});
