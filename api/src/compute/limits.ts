// What an instance or task may use, whatever the runtime: its instance type's grant (InstanceSpec.resources),
// else the agent's defaults. The process runtime's sandbox applies it with cgroups, the docker runtime
// with the engine's HostConfig.
import type { InstanceSpec } from './protocol.ts';
import type { AgentSettings } from './settings.ts';

export interface Limits {
  memoryBytes: number;
  cpuCores: number;
  pids: number;
}

export type LimitDefaults = Pick<AgentSettings, 'defaultMemory' | 'defaultCpuCores' | 'pidsLimit'>;

export function limitsOf(spec: InstanceSpec, defaults: LimitDefaults): Limits {
  return {
    memoryBytes: spec.resources?.memoryBytes ?? defaults.defaultMemory,
    cpuCores: spec.resources?.cpuCores ?? defaults.defaultCpuCores,
    pids: defaults.pidsLimit,
  };
}
