// What GPUs this agent offers: nvidia-smi's inventory when the tool is present, else what the config
// declares (a GPU-less machine offers LOCAL). Each detected model becomes one GpuOffer: capacity = how many
// of it the host has, one instance type LOCAL.GPU.<name>_1x. The process runtime does not pin GPUs to
// instances (no CUDA_VISIBLE_DEVICES yet); capacity is what placement counts against.
import { execFile } from 'node:child_process';
import type { GpuOffer } from './protocol.ts';

const QUERY = ['--query-gpu=name,memory.total', '--format=csv,noheader'];

export interface GpuDiscovery {
  gpus: GpuOffer[];
  source: 'nvidia-smi' | 'config';
  /** Why nvidia-smi was not used, when it was not. */
  reason?: string;
}

export async function discoverGpus(declared: GpuOffer[], options: { command?: string; timeoutMs?: number } = {}): Promise<GpuDiscovery> {
  let output: string;
  try {
    output = await run(options.command ?? 'nvidia-smi', QUERY, options.timeoutMs ?? 5000);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return { gpus: declared, source: 'config', reason: code === 'ENOENT' ? 'nvidia-smi not found' : `nvidia-smi failed: ${(error as Error).message.split('\n')[0]}` };
  }
  const gpus = parseNvidiaSmi(output);
  if (gpus.length === 0) return { gpus: declared, source: 'config', reason: 'nvidia-smi listed no GPU' };
  return { gpus, source: 'nvidia-smi' };
}

function run(command: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { timeout: timeoutMs, encoding: 'utf8' }, (error, stdout) => (error ? reject(error) : resolve(stdout)));
  });
}

/** Lines like "NVIDIA L40S, 46068 MiB" → one offer per model, capacity = its count. */
export function parseNvidiaSmi(output: string): GpuOffer[] {
  const byName = new Map<string, { count: number; memoryMiB: number }>();
  for (const line of output.split('\n')) {
    if (!line.trim()) continue;
    const comma = line.lastIndexOf(',');
    const rawName = (comma === -1 ? line : line.slice(0, comma)).trim();
    const memoryMiB = comma === -1 ? 0 : Number.parseInt(line.slice(comma + 1), 10) || 0;
    const name = gpuName(rawName);
    if (!name) continue;
    const entry = byName.get(name) ?? { count: 0, memoryMiB };
    entry.count += 1;
    byName.set(name, entry);
  }
  return [...byName].map(([name, { count, memoryMiB }]) => ({
    name,
    capacity: count,
    instanceTypes: [{
      name: `LOCAL.GPU.${name}_1x`,
      description: `One ${name}${memoryMiB ? ` (${Math.round(memoryMiB / 1024)} GiB)` : ''} on this host`,
      default: true,
    }],
  }));
}

/**
 * The short model name the platform uses: "NVIDIA L40S" → L40S, "NVIDIA A100-SXM4-80GB" → A100,
 * "NVIDIA H100 80GB HBM3" → H100, "Tesla T4" → T4, "NVIDIA GeForce RTX 4090" → RTX_4090,
 * "NVIDIA RTX A6000" → RTX_A6000.
 */
export function gpuName(raw: string): string {
  const words = raw.replace(/^(NVIDIA\s+)?((Tesla|GeForce|Quadro)\s+)?/i, '').split(/\s+/).filter(Boolean);
  if (words.length === 0) return '';
  const first = words[0].split('-')[0];
  if (/^(RTX|GTX|TITAN)$/i.test(first) && words[1]) return `${first}_${words[1].split('-')[0]}`.toUpperCase();
  return first.toUpperCase();
}
