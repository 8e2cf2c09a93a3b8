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
/** "8080,3478" (or a YAML list) as port numbers. */
const portList = z.preprocess((value) => (typeof value === 'string' ? value.split(',').map((part) => part.trim()).filter(Boolean) : value),
  z.array(z.coerce.number().int().min(1).max(65535)));
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
  /** This agent's node name within its cluster (agents sharing a cluster credential need different ones); default the host name. */
  nodeName: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/, 'expected letters, digits, ., - or _ (up to 253)').optional(),
  /** Address the invocation plane reaches this agent's instances at. */
  advertiseHost: z.string().min(1).default('127.0.0.1'),
  /** TCP port of the result keeper on advertiseHost (several API replicas send requests through it); 0: any free one. */
  keeperPort: z.coerce.number().int().min(0).max(65535).default(0),
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
  // Docker runtime, tenant isolation (docs/security.md, "Docker runtime").
  /** `auto`: each container gets its own host uid/gid range (podman, from /etc/subuid's `containers`); `engine`: the engine's own choice (dockerd's userns-remap, or none). */
  dockerUserns: z.enum(['auto', 'engine']).default('auto'),
  /** `account`: a bridge network per account, walled off by the agent's nftables table; `engine`: the engine's default network, shared by all. */
  dockerNetwork: z.enum(['account', 'engine']).default('account'),
  /** Host ports (TCP and UDP) containers on account networks may still reach, e.g. the gateway's public port. */
  dockerHostPorts: portList.default([]),
  /** A read-only root filesystem with a tmpfs on /tmp. */
  dockerReadOnlyRoot: flag.default(false),
  /** The engine's OCI runtime for every container of this agent (e.g. runsc for gVisor); default the engine's. */
  dockerRuntime: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.+-]*$/, 'expected an OCI runtime name such as runsc').optional(),
  // Process runtime, tenant isolation (docs/security.md, "Process runtime").
  /** `auto`: every instance in a sandbox where this host allows one, else only the installation's own account runs here; `on`: refuse to start without one; `off`: never (development only). */
  sandbox: z.enum(['auto', 'on', 'off']).default('auto'),
  /** Host paths sandboxed instances see read-only besides the system's (/usr, /etc, /opt); default the repository (the samples and their modules) and the image catalog's directory. */
  sandboxReadOnlyPaths: z.preprocess((value) => (typeof value === 'string' ? value.split(',').filter(Boolean) : value), z.array(z.string().min(1))).optional(),
  /** A /16 whose /30s are the sandboxes' networks (host .1, instance .2). */
  sandboxSubnet: z.string().regex(/^\d{1,3}\.\d{1,3}\.0\.0\/16$/, 'expected a /16 such as 10.199.0.0/16').default('10.199.0.0/16'),
  /** Sandboxed instances run as uid and gid <base> + their network slot (0-16383): ids no account of this host uses. */
  sandboxUidBase: z.coerce.number().int().min(1000).max(4_294_000_000).default(2_000_000_000),
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
  /** What the agent keeps of each instance's and task's output for its owner (logs): at most this much per instance… */
  logBytesPerInstance: byteSize.default(1024 * 1024),
  /** …for this long after the instance last exited. */
  logRetentionMs: z.coerce.number().int().min(0).default(3_600_000),
  /** A remote agent (`svc agent`): the platform URL, the cluster's agent credential, the api host. */
  /** Several, comma-separated, are tried in turn (API replicas without a load balancer in front). */
  server: z.string().refine((value) => value.split(',').every((url) => URL.canParse(url.trim())), 'must be a URL, or several separated by commas').optional(),
  credential: z.string().optional(),
  apiHost: z.string().optional(),
});

export type AgentSettings = z.infer<typeof agentSettingsSchema>;

/** Environment variables a config loader can map onto these settings (relative to the mount point). */
export const agentEnvSettings: Record<string, keyof AgentSettings> = {
  SVC_AGENT_RUNTIME: 'runtime',
  SVC_AGENT_STATE_DIR: 'stateDir',
  SVC_AGENT_IMAGE_CATALOG: 'imageCatalog',
  SVC_AGENT_NODE_NAME: 'nodeName',
  SVC_AGENT_ADVERTISE_HOST: 'advertiseHost',
  SVC_AGENT_KEEPER_PORT: 'keeperPort',
  SVC_AGENT_UDP_PORT_RANGE: 'udpPortRange',
  SVC_AGENT_UDP_PORTS_PER_INSTANCE: 'udpPortsPerInstance',
  SVC_AGENT_DOCKER_SOCKET: 'dockerSocket',
  SVC_AGENT_DOCKER_PUBLISH_ADDRESS: 'dockerPublishAddress',
  SVC_AGENT_DOCKER_GPUS: 'dockerGpus',
  SVC_AGENT_DOCKER_PULL: 'dockerPull',
  SVC_AGENT_DOCKER_USERNS: 'dockerUserns',
  SVC_AGENT_DOCKER_NETWORK: 'dockerNetwork',
  SVC_AGENT_DOCKER_HOST_PORTS: 'dockerHostPorts',
  SVC_AGENT_DOCKER_READ_ONLY_ROOT: 'dockerReadOnlyRoot',
  SVC_AGENT_DOCKER_RUNTIME: 'dockerRuntime',
  SVC_AGENT_SERVER: 'server',
  SVC_AGENT_CREDENTIAL: 'credential',
  SVC_AGENT_API_HOST: 'apiHost',
  SVC_AGENT_TASK_PROGRESS_INTERVAL_MS: 'taskProgressIntervalMs',
  SVC_AGENT_SANDBOX: 'sandbox',
  SVC_AGENT_SANDBOX_READ_ONLY_PATHS: 'sandboxReadOnlyPaths',
  SVC_AGENT_SANDBOX_SUBNET: 'sandboxSubnet',
  SVC_AGENT_SANDBOX_UID_BASE: 'sandboxUidBase',
  SVC_AGENT_DEFAULT_MEMORY: 'defaultMemory',
  SVC_AGENT_DEFAULT_CPU_CORES: 'defaultCpuCores',
  SVC_AGENT_PIDS_LIMIT: 'pidsLimit',
  SVC_AGENT_LOG_BYTES_PER_INSTANCE: 'logBytesPerInstance',
  SVC_AGENT_LOG_RETENTION_MS: 'logRetentionMs',
};
