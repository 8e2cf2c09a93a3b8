// What an instance type grants an instance (cluster registration's cpuCores and systemMemory), in the
// units the agent's runtimes cap it with. A type that says nothing leaves it to the agent's defaults.
import { parseByteSize } from '../../byte-size.ts';
import type { Resources } from '../../compute/protocol.ts';
import type { Gpu } from './schema.ts';

/** The resources of `instanceType` of `gpu` among a cluster's offers, or undefined when it declares none. */
export function resourcesOf(gpus: Gpu[], gpu: string, instanceType: string): Resources | undefined {
  const type = gpus.find((offer) => offer.name === gpu)?.instanceTypes.find((candidate) => candidate.name === instanceType);
  const memoryBytes = type?.systemMemory ? parseByteSize(type.systemMemory) : undefined;
  const resources: Resources = {
    ...(type?.cpuCores ? { cpuCores: type.cpuCores } : {}),
    ...(memoryBytes ? { memoryBytes } : {}),
  };
  return Object.keys(resources).length ? resources : undefined;
}
