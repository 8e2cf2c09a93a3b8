// GPU discovery: nvidia-smi's CSV as real machines print it, and the fall-back to declared GPUs when the
// tool is absent or fails (real executables, not stubs of our code).
import assert from 'node:assert/strict';
import { chmod, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { discoverGpus, gpuName, parseNvidiaSmi } from '../../src/compute/gpus.ts';
import type { GpuOffer } from '../../src/compute/protocol.ts';
import { tempDir } from './helpers.ts';

// `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader` on real hosts.
const L40S_X2 = 'NVIDIA L40S, 46068 MiB\nNVIDIA L40S, 46068 MiB\n';
const MIXED = 'NVIDIA A100-SXM4-80GB, 81920 MiB\nNVIDIA H100 80GB HBM3, 81559 MiB\nNVIDIA A100-SXM4-80GB, 81920 MiB\n';
const declared: GpuOffer[] = [{ name: 'LOCAL', capacity: 8, instanceTypes: [{ name: 'LOCAL.CPU_1x', default: true }] }];

describe('gpus', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  before(async () => { dir = await tempDir('gpus'); });
  after(() => dir.remove());

  test('two L40S become one offer of capacity 2 with a 1x instance type', () => {
    assert.deepEqual(parseNvidiaSmi(L40S_X2), [{
      name: 'L40S', capacity: 2,
      instanceTypes: [{ name: 'LOCAL.GPU.L40S_1x', description: 'One L40S (45 GiB) on this host', default: true }],
    }]);
  });

  test('mixed models are counted per model; names are shortened the way the platform names GPUs', () => {
    assert.deepEqual(parseNvidiaSmi(MIXED).map((gpu) => [gpu.name, gpu.capacity, gpu.instanceTypes[0].name]), [
      ['A100', 2, 'LOCAL.GPU.A100_1x'], ['H100', 1, 'LOCAL.GPU.H100_1x'],
    ]);
    const names = ['Tesla T4', 'NVIDIA A10G', 'NVIDIA GeForce RTX 4090', 'NVIDIA RTX A6000', 'Tesla V100-SXM2-16GB', 'NVIDIA H100 PCIe', 'NVIDIA L4'];
    assert.deepEqual(names.map(gpuName), ['T4', 'A10G', 'RTX_4090', 'RTX_A6000', 'V100', 'H100', 'L4']);
    assert.deepEqual(parseNvidiaSmi('NVIDIA L4, 23034\n\n'), parseNvidiaSmi('NVIDIA L4, 23034 MiB'), 'with or without units');
    assert.deepEqual(parseNvidiaSmi(''), []);
  });

  test('nvidia-smi present: its inventory; absent or failing: the declared GPUs, saying why', async () => {
    const fake = path.join(dir.dir, 'nvidia-smi');
    await writeFile(fake, `#!/bin/sh\n[ "$1" = "--query-gpu=name,memory.total" ] && [ "$2" = "--format=csv,noheader" ] || exit 2\nprintf '${L40S_X2.replaceAll('\n', '\\n')}'\n`);
    await chmod(fake, 0o755);
    const found = await discoverGpus(declared, { command: fake });
    assert.equal(found.source, 'nvidia-smi');
    assert.deepEqual(found.gpus, parseNvidiaSmi(L40S_X2));

    assert.deepEqual(await discoverGpus(declared, { command: path.join(dir.dir, 'absent') }),
      { gpus: declared, source: 'config', reason: 'nvidia-smi not found' });

    const broken = path.join(dir.dir, 'broken-smi');
    await writeFile(broken, '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver" >&2\nexit 9\n');
    await chmod(broken, 0o755);
    const failed = await discoverGpus(declared, { command: broken });
    assert.equal(failed.source, 'config');
    assert.deepEqual(failed.gpus, declared);
    assert.match(failed.reason!, /^nvidia-smi failed: /);
  });
});
