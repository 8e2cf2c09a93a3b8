// The worker agent's settings, one zod schema for config.ts to mount (e.g. under compute.agent) so that
// the file, the environment and the defaults are declared once.
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { parseByteSize } from '../byte-size.ts';

/** The repository's sample catalog: what `npm start` deploys. */
export const DEFAULT_IMAGE_CATALOG = fileURLToPath(new URL('../../../samples/images.yaml', import.meta.url));

/** "min-max", inclusive, as a [min, max] pair. */
export const portRangeSchema = z.string().regex(/^\d{1,5}-\d{1,5}$/, 'expected <min>-<max>').transform((value, context) => {
  const [min, max] = value.split('-').map(Number) as [number, number];
  if (min < 1 || max > 65535 || min > max) context.addIssue({ code: 'custom', message: `bad port range ${value}` });
  return [min, max] as [number, number];
});
const flag = z.preprocess((value) => (typeof value === 'string' ? value === 'true' : value), z.boolean());
const byteSize = z.preprocess((value) => (typeof value === 'number' ? String(value) : value), z.string().transform((value, context) => {
  const bytes = parseByteSize(value);
  if (bytes === undefined) context.addIssue({ code: 'custom', message: `expected a size such as 4Gi or 512Mi, got ${value}` });
  return bytes ?? 0;
}));

export const agentSettingsSchema = z.object({
  /** How instances run: `process` (image catalog, the embedded default) or `docker` (Docker Engine API). */
  runtime: z.enum(['process', 'docker']).default('process'),
  /** Instance work dirs and pid files; default <store.dataDir>/agent. */
  stateDir: z.string().optional(),
  /** Image catalog of the process runtime. */
  imageCatalog: z.string().default(DEFAULT_IMAGE_CATALOG),
  /** Address the invocation plane reaches this agent's instances at. */
  advertiseHost: z.string().min(1).default('127.0.0.1'),
  /** UDP pool for STREAMING media (spec 4.6), split into blocks per instance. */
  udpPortRange: portRangeSchema.default([47998, 48020]),
  udpPortsPerInstance: z.coerce.number().int().min(2).max(1000).default(4),
  /** Docker runtime: engine socket (default DOCKER_HOST=unix://… or /var/run/docker.sock). */
  dockerSocket: z.string().optional(),
  /** Docker runtime: host address published TCP ports bind to. */
  dockerPublishAddress: z.string().default('127.0.0.1'),
  /** Docker runtime: give containers all GPUs (NVIDIA container toolkit). */
  dockerGpus: flag.default(false),
  /** Docker runtime: pull an instance's image `missing` from the engine, `always`, or `never`. */
  dockerPull: z.enum(['always', 'missing', 'never']).default('missing'),
  /** Every instance and task is capped (cgroups); these apply where its instance type gives no systemMemory / cpuCores. */
  defaultMemory: byteSize.default(4 * 2 ** 30),
  defaultCpuCores: z.coerce.number().positive().default(2),
  /** The most processes and threads one instance or task may hold at once. */
  pidsLimit: z.coerce.number().int().min(16).default(1024),
  /** SIGTERM-to-kill grace when stopping an instance. */
  stopGraceMs: z.coerce.number().int().min(0).default(10_000),
  /** Restart back-off: initial delay, doubling to the maximum; reset after this long RUNNING. */
  restartInitialMs: z.coerce.number().int().min(1).default(1000),
  restartMaxMs: z.coerce.number().int().min(1).default(30_000),
  restartResetAfterMs: z.coerce.number().int().min(0).default(60_000),
  /** Health probing of RUNNING instances. */
  healthIntervalMs: z.coerce.number().int().min(100).default(5000),
  healthFailureThreshold: z.coerce.number().int().min(1).default(3),
  /** How often the progress files of running tasks are checked (percentComplete, heartbeats). */
  taskProgressIntervalMs: z.coerce.number().int().min(50).default(500),
  /** A remote agent (`svc agent`): the platform URL, the cluster's agent credential, the api host. */
  server: z.string().url().optional(),
  credential: z.string().optional(),
  apiHost: z.string().optional(),
});

export type AgentSettings = z.infer<typeof agentSettingsSchema>;

/** Environment variables a config loader can map onto these settings (relative to the mount point). */
export const agentEnvSettings: Record<string, keyof AgentSettings> = {
  SVC_AGENT_RUNTIME: 'runtime',
  SVC_AGENT_STATE_DIR: 'stateDir',
  SVC_AGENT_IMAGE_CATALOG: 'imageCatalog',
  SVC_AGENT_ADVERTISE_HOST: 'advertiseHost',
  SVC_AGENT_UDP_PORT_RANGE: 'udpPortRange',
  SVC_AGENT_UDP_PORTS_PER_INSTANCE: 'udpPortsPerInstance',
  SVC_AGENT_DOCKER_SOCKET: 'dockerSocket',
  SVC_AGENT_DOCKER_PUBLISH_ADDRESS: 'dockerPublishAddress',
  SVC_AGENT_DOCKER_GPUS: 'dockerGpus',
  SVC_AGENT_DOCKER_PULL: 'dockerPull',
  SVC_AGENT_SERVER: 'server',
  SVC_AGENT_CREDENTIAL: 'credential',
  SVC_AGENT_API_HOST: 'apiHost',
  SVC_AGENT_TASK_PROGRESS_INTERVAL_MS: 'taskProgressIntervalMs',
  SVC_AGENT_DEFAULT_MEMORY: 'defaultMemory',
  SVC_AGENT_DEFAULT_CPU_CORES: 'defaultCpuCores',
  SVC_AGENT_PIDS_LIMIT: 'pidsLimit',
};
