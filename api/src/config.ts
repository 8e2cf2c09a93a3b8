// Every setting of the platform: a YAML file (SVC_CONFIG) overlaid by environment variables, validated
// once at start-up. A bad value stops the process with one line naming the setting.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import './domain/zod-messages.ts';
import { agentEnvSettings, agentSettingsSchema, portRangeSchema } from './compute/settings.ts';
import { autoscalerEnvSettings, autoscalerSettingsSchema } from './autoscaler/settings.ts';
import { gpuSchema } from './control/clusters/schema.ts';
import { tasksEnvSettings, tasksSettingsSchema } from './control/tasks/settings.ts';
import { streamingEnvSettings, streamingSettingsSchema } from './streaming/settings.ts';
import { checkNatsSettings, natsEnvSettings, natsSettingsSchema } from './invocation/settings.ts';
import { metricsEnvSettings, metricsSettingsSchema } from './http/metrics.ts';
import { statsEnvSettings, statsSettingsSchema } from './control/stats/settings.ts';
import { telemetryEnvSettings, telemetrySettingsSchema } from './telemetry/settings.ts';

const port = z.coerce.number().int().min(0).max(65535);
const limit = (max: number) => z.coerce.number().int().min(0).max(max);

export const configSchema = z.object({
  gateway: z.object({
    /** Domain the gateway serves: api.<address> and api-keys.<address>. */
    address: z.string().min(1).default('localhost'),
    host: z.string().min(1).default('0.0.0.0'),
    port: port.default(8080),
    tlsCert: z.string().optional(),
    /**
     * Where the other API replicas reach this one (compute.placement 'elected': they hand streaming sessions
     * to the replica holding placement). Default: this machine's first address off loopback (its pod's IP),
     * or gateway.host when it names one, and the port the gateway listens on.
     */
    replicaUrl: z.url({ protocol: /^https?$/ }).optional(),
    tlsKey: z.string().optional(),
    /** Largest JSON body accepted by management endpoints. */
    bodyLimit: z.string().default('1mb'),
  }).prefault({}),
  store: z.object({
    dataDir: z.string().default('./data'),
    /** PostgreSQL connection string; the embedded SQLite file is used when absent. */
    databaseUrl: z.string().regex(/^postgres(ql)?:\/\/\S+$/, 'must be a postgres:// or postgresql:// URL (the embedded SQLite is used when it is unset)').optional(),
  }).prefault({}),
  api: z.object({
    accountBootstrap: z.object({
      ncaId: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$/).default('svc-default'),
      name: z.string().min(1).default('svc-default'),
      adminClientIds: z.array(z.string()).default(['svc-admin']),
      limits: z.object({
        maxFunctions: limit(2147483647).default(100),
        maxTasks: limit(2147483647).default(100),
        maxTelemetries: limit(50).default(10),
        maxRegistryCredentials: limit(50).default(10),
        /** Function instances an account may hold at once (beside the spec's four). */
        maxInstances: limit(2147483647).default(100),
        /** Input assets an account may keep, and their bytes together. */
        maxAssets: limit(2147483647).default(1000),
        maxAssetBytes: limit(Number.MAX_SAFE_INTEGER).default(10 * 1024 ** 3),
      }).prefault({}),
    }).prefault({}),
  }).prefault({}),
  keys: z.object({
    /** Audience service id carried by every credential this installation issues. */
    serviceId: z.string().min(1).default('svc-api'),
    /** Lifetime of the management token minted by `svc init`, in seconds. */
    tokenLifetimeSeconds: z.coerce.number().int().min(60).max(31_536_000).default(43_200),
    /** How long a verified credential is trusted before it is checked again (revocation latency). */
    recheckMs: z.coerce.number().int().min(0).max(1000).default(500),
  }).prefault({}),
  secrets: z.object({
    /** 32-byte AES-256-GCM key, base64. Generated into the data dir on first start when absent. */
    key: z.string().optional(),
    /** Retired keys, still accepted for decryption while data is re-encrypted. */
    previousKeys: z.preprocess((v) => typeof v === 'string' ? v.split(',').filter(Boolean) : v, z.array(z.string())).default([]),
  }).prefault({}),
  admin: z.object({
    /** ES256 private key (PKCS#8 PEM) that signs account-administration tokens. */
    signingKeyFile: z.string().optional(),
    tokenLifetimeSeconds: z.coerce.number().int().min(60).max(86_400).default(3600),
  }).prefault({}),
  invocation: z.object({
    /** SVC-POLL-SECONDS when the client gives none (the reference service's default). */
    pollSeconds: z.coerce.number().int().min(1).max(3600).default(60),
    /** The same for Accept: text/event-stream. */
    ssePollSeconds: z.coerce.number().int().min(1).max(3600).default(1200),
    /** Larger SVC-POLL-SECONDS is a 400. */
    maxPollSeconds: z.coerce.number().int().min(1).max(3600).default(3600),
    maxRequestBytes: z.coerce.number().int().min(1024).default(10 * 1024 * 1024),
    /** The most a polled (202'd) result holds in the store; a larger one is zipped and answered 302. Streamed responses have no limit. */
    maxResultBytes: z.coerce.number().int().min(1024).default(16 * 1024 * 1024),
    /** The largest such zip kept (zip32: under 4 GiB); a larger result ends 502. */
    maxLargeResultBytes: z.coerce.number().int().min(1024).max(0xffffffff).default(1024 * 1024 * 1024),
    /** Requests waiting per function version before new ones get 429. */
    maxQueueDepth: z.coerce.number().int().min(1).default(10_000),
    /** How long an uncollected result of a 202'd request is kept. */
    resultRetentionSeconds: z.coerce.number().int().min(1).default(3600),
    /**
     * With several replicas, requests pass the result keeper of their instance's node, which finishes a
     * 202'd request whose replica died (docs/scale-out.md); false sends them straight to the instance: one
     * hop less, and such a request ends 502.
     */
    resultKeepers: z.preprocess((value) => ({ true: true, false: false }[String(value)] ?? value), z.boolean({ error: 'must be true or false' })).default(true),
    /** The NATS server several API replicas share: URL, prefix, credentials, TLS (invocation/settings.ts). */
    ...natsSettingsSchema.shape,
  }).superRefine(checkNatsSettings).prefault({}),
  /** Input assets (SVC-INPUT-ASSET-REFERENCES) and the signed URLs of assets and large results. */
  assets: z.object({
    /** The largest asset an upload may hold. */
    maxBytes: z.coerce.number().int().min(1024).default(1024 * 1024 * 1024),
    /** How long a signed upload or download URL of an asset works. */
    urlSeconds: z.coerce.number().int().min(60).max(7 * 86_400).default(3600),
    /** The blob store's directory (assets and large results); default <dataDir>/blobs. Replicas share one. */
    dir: z.string().optional(),
  }).prefault({}),
  /** Streaming sessions: the session broker and its line (streaming/settings.ts). */
  streaming: streamingSettingsSchema.prefault({}),
  turn: z.object({
    /** auto: coturn when installed, else node-turn (STUN only); external: a TURN server you run; none: no STUN/TURN. */
    server: z.enum(['auto', 'coturn', 'node-turn', 'external', 'none']).default('auto'),
    /** The address browsers and containers reach the TURN server at. */
    publicIp: z.string().min(1).default('127.0.0.1'),
    listenIp: z.string().min(1).default('127.0.0.1'),
    port: port.default(3478),
    relayPortRange: portRangeSchema.default([49160, 49200]),
    realm: z.string().min(1).default('svc'),
    /** Shared secret of the TURN REST credentials; generated and kept sealed in the store when absent. */
    secret: z.string().min(16).optional(),
    /** Lifetime of a session's TURN credentials. */
    credentialTtlSeconds: z.coerce.number().int().min(60).max(86_400).default(28_800),
    coturnBinary: z.string().default('/usr/bin/turnserver'),
  }).prefault({}),
  /** npm start's streaming demo proxy (svc serve --samples): development only, so loopback by default. */
  demoProxy: z.object({
    host: z.string().min(1).default('127.0.0.1'),
    port: z.coerce.number().int().min(1).max(65535).default(49100),
  }).prefault({}),
  tasks: tasksSettingsSchema.prefault({}),
  /** The function autoscaler (api/src/autoscaler/README.md). */
  autoscaler: autoscalerSettingsSchema.prefault({}),
  /** GET /metrics (Prometheus text format). */
  metrics: metricsSettingsSchema.prefault({}),
  /** The owners' numbers (GET …/stats): rows per interval, kept for the retention. */
  stats: statsSettingsSchema.prefault({}),
  /** Export to the telemetries functions and tasks name (api/src/telemetry). */
  telemetry: telemetrySettingsSchema.prefault({}),
  compute: z.object({
    /**
     * Who runs placement (and holds the agents' links): true, this process always (one process, SQLite);
     * false, never (another replica does); 'elected', whichever replica holds the placement lease in
     * PostgreSQL, while every replica takes agent links and relays them to it over NATS (docs/scale-out.md).
     */
    placement: z.preprocess((value) => ({ true: true, false: false }[String(value)] ?? value),
      z.union([z.boolean(), z.literal('elected')], { error: 'must be true, false or elected' })).default(true),
    /** With placement 'elected': how long the lease lasts unless its holder renews it (five times per period). */
    placementLeaseMs: z.coerce.number().int().min(1000).max(120_000).default(5000),
    /**
     * How long an agent's lease lasts without an answer over its link (pinged three times per lease): once
     * it lapses, the node's instances are LOST and placed on other nodes (docs/scale-out.md, "Hosts").
     */
    agentLeaseMs: z.coerce.number().int().min(300).max(600_000).default(30_000),
    /** `svc serve` runs a worker agent for the local cluster in its own process, linked over loopback. */
    inProcessAgent: z.preprocess((value) => (typeof value === 'string' ? value !== 'false' : value), z.boolean()).default(true),
    agent: agentSettingsSchema.prefault({}),
    /** The embedded default: this machine registered as one cluster, usable by every account. */
    localCluster: z.object({
      enabled: z.preprocess((value) => (typeof value === 'string' ? value !== 'false' : value), z.boolean()).default(true),
      name: z.string().default('local'),
      groupName: z.string().default('svc-local'),
      /** What this machine offers when no GPU is detected; a GPU-less machine offers LOCAL. */
      gpus: z.array(gpuSchema).default([{
        name: 'LOCAL', capacity: 8,
        instanceTypes: [{ name: 'LOCAL.CPU_1x', description: 'A process on this machine, no GPU', default: true }],
      }]),
    }).prefault({}),
  }).prefault({}),
  log: z.object({
    level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  }).prefault({}),
  /** Bounds of a long-running process (process/guard.ts): a runaway ends fast instead of taking the machine. */
  guard: z.object({
    /** V8 heap cap (--max-old-space-size) of svc serve, agent and autoscaler; 0 keeps Node's default. */
    maxHeapMb: z.coerce.number().int().min(0).default(2048),
    /** The watchdog ends the process when its resident memory passes this; 0: no bound. */
    maxRssMb: z.coerce.number().int().min(0).default(4096),
    /** A turn of the event loop this long is a block: logged with where, and readiness fails. */
    blockedMs: z.coerce.number().int().min(50).default(2000),
    /** How long readiness stays failed after a block. */
    unreadySeconds: z.coerce.number().int().min(0).default(10),
    /** The watchdog ends a process whose loop is blocked this long; 0: never. */
    exitAfterSeconds: z.coerce.number().int().min(0).default(60),
  }).prefault({}),
});

export type Config = z.infer<typeof configSchema>;
export type ConfigInput = z.input<typeof configSchema>;

/** Environment variables and the setting each one overrides. */
export const envSettings: Record<string, string> = {
  SVC_GATEWAY_ADDRESS: 'gateway.address',
  SVC_HOST: 'gateway.host',
  SVC_PORT: 'gateway.port',
  SVC_TLS_CERT: 'gateway.tlsCert',
  SVC_REPLICA_URL: 'gateway.replicaUrl',
  SVC_TLS_KEY: 'gateway.tlsKey',
  SVC_DATA_DIR: 'store.dataDir',
  SVC_DATABASE_URL: 'store.databaseUrl',
  SVC_ACCOUNT_ID: 'api.accountBootstrap.ncaId',
  SVC_ACCOUNT_MAX_FUNCTIONS: 'api.accountBootstrap.limits.maxFunctions',
  SVC_ACCOUNT_MAX_TASKS: 'api.accountBootstrap.limits.maxTasks',
  SVC_ACCOUNT_MAX_TELEMETRIES: 'api.accountBootstrap.limits.maxTelemetries',
  SVC_ACCOUNT_MAX_REGISTRY_CREDENTIALS: 'api.accountBootstrap.limits.maxRegistryCredentials',
  SVC_ACCOUNT_MAX_INSTANCES: 'api.accountBootstrap.limits.maxInstances',
  SVC_ACCOUNT_MAX_ASSETS: 'api.accountBootstrap.limits.maxAssets',
  SVC_ACCOUNT_MAX_ASSET_BYTES: 'api.accountBootstrap.limits.maxAssetBytes',
  SVC_KEYS_SERVICE_ID: 'keys.serviceId',
  SVC_SECRETS_KEY: 'secrets.key',
  SVC_SECRETS_PREVIOUS_KEYS: 'secrets.previousKeys',
  SVC_ADMIN_SIGNING_KEY_FILE: 'admin.signingKeyFile',
  SVC_LOCAL_CLUSTER: 'compute.localCluster.enabled',
  SVC_PLACEMENT: 'compute.placement',
  SVC_PLACEMENT_LEASE_MS: 'compute.placementLeaseMs',
  SVC_AGENT_LEASE_MS: 'compute.agentLeaseMs',
  ...Object.fromEntries(Object.entries(natsEnvSettings).map(([name, setting]) => [name, `invocation.${setting}`])),
  SVC_RESULT_KEEPERS: 'invocation.resultKeepers',
  SVC_ASSET_MAX_BYTES: 'assets.maxBytes',
  SVC_ASSET_URL_SECONDS: 'assets.urlSeconds',
  SVC_BLOB_DIR: 'assets.dir',
  SVC_IN_PROCESS_AGENT: 'compute.inProcessAgent',
  ...Object.fromEntries(Object.entries(agentEnvSettings).map(([name, setting]) => [name, `compute.agent.${setting}`])),
  ...Object.fromEntries(Object.entries(streamingEnvSettings).map(([name, setting]) => [name, `streaming.${setting}`])),
  SVC_TURN_SERVER: 'turn.server',
  SVC_TURN_PUBLIC_IP: 'turn.publicIp',
  SVC_TURN_LISTEN_IP: 'turn.listenIp',
  SVC_TURN_PORT: 'turn.port',
  SVC_TURN_RELAY_PORT_RANGE: 'turn.relayPortRange',
  SVC_TURN_SECRET: 'turn.secret',
  SVC_DEMO_PROXY_HOST: 'demoProxy.host',
  SVC_DEMO_PROXY_PORT: 'demoProxy.port',
  ...Object.fromEntries(Object.entries(tasksEnvSettings).map(([name, setting]) => [name, `tasks.${setting}`])),
  ...Object.fromEntries(Object.entries(autoscalerEnvSettings).map(([name, setting]) => [name, `autoscaler.${setting}`])),
  ...Object.fromEntries(Object.entries(metricsEnvSettings).map(([name, setting]) => [name, `metrics.${setting}`])),
  ...Object.fromEntries(Object.entries(statsEnvSettings).map(([name, setting]) => [name, `stats.${setting}`])),
  ...Object.fromEntries(Object.entries(telemetryEnvSettings).map(([name, setting]) => [name, `telemetry.${setting}`])),
  SVC_LOG_LEVEL: 'log.level',
  SVC_MAX_HEAP_MB: 'guard.maxHeapMb',
  SVC_MAX_RSS_MB: 'guard.maxRssMb',
  SVC_EVENT_LOOP_BLOCKED_MS: 'guard.blockedMs',
  SVC_EVENT_LOOP_UNREADY_SECONDS: 'guard.unreadySeconds',
  SVC_EVENT_LOOP_EXIT_AFTER_SECONDS: 'guard.exitAfterSeconds',
};

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Reads SVC_CONFIG (if set), applies the environment, validates. Throws ConfigError with one line. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: ConfigInput = {}): Config {
  let raw: Record<string, unknown> = {};
  if (env.SVC_CONFIG) {
    try {
      raw = (parseYaml(readFileSync(env.SVC_CONFIG, 'utf8')) ?? {}) as Record<string, unknown>;
    } catch (error) {
      throw new ConfigError(`SVC_CONFIG ${env.SVC_CONFIG}: ${(error as Error).message.split('\n')[0]}`);
    }
    if (typeof raw !== 'object' || Array.isArray(raw)) throw new ConfigError(`SVC_CONFIG ${env.SVC_CONFIG}: not a mapping`);
    const unknown = unknownSetting(configSchema, raw, []);
    if (unknown) {
      const guess = unknown.near ? ` (did you mean ${unknown.near}?)` : '';
      throw new ConfigError(`unknown setting ${unknown.path.join('.')} in ${env.SVC_CONFIG}${guess}`);
    }
  }
  for (const [name, setting] of Object.entries(envSettings)) {
    const value = env[name];
    if (value !== undefined && value !== '') setPath(raw, setting, value);
  }
  mergeInto(raw, overrides as Record<string, unknown>);
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const setting = issue.path.join('.');
    const envName = Object.keys(envSettings).find((name) => envSettings[name] === setting);
    throw new ConfigError(`invalid setting ${setting}${envName ? ` (${envName})` : ''}: ${issue.message}`);
  }
  const config = parsed.data;
  if (Boolean(config.gateway.tlsCert) !== Boolean(config.gateway.tlsKey)) {
    throw new ConfigError('gateway.tlsCert and gateway.tlsKey (SVC_TLS_CERT, SVC_TLS_KEY) must be set together');
  }
  if (config.compute.placement === 'elected' && (!config.store.databaseUrl || !config.invocation.natsUrl)) {
    throw new ConfigError('compute.placement (SVC_PLACEMENT) elected needs PostgreSQL and NATS (store.databaseUrl, invocation.natsUrl): replicas elect over the one and relay agent links over the other');
  }
  if (config.compute.placement === 'elected' && config.compute.localCluster.enabled && config.compute.inProcessAgent) {
    throw new ConfigError('compute.placement (SVC_PLACEMENT) elected runs no in-process agent: set compute.localCluster.enabled (SVC_LOCAL_CLUSTER) false and link agents with `svc agent`');
  }
  config.store.dataDir = path.resolve(config.store.dataDir);
  return config;
}

/**
 * The first key of a YAML document that no setting has (a typo would otherwise be dropped silently),
 * with the known key it is closest to. Walks the schema: objects by their shape, arrays by element,
 * through defaults, optionals and preprocessing.
 */
function unknownSetting(schema: z.ZodType, value: unknown, path: string[]): { path: string[]; near?: string } | undefined {
  const def = schema._zod.def as { type: string; innerType?: z.ZodType; in?: z.ZodType; out?: z.ZodType; element?: z.ZodType; shape?: Record<string, z.ZodType> };
  switch (def.type) {
    case 'default': case 'prefault': case 'optional': case 'nullable':
      return unknownSetting(def.innerType!, value, path);
    case 'pipe':
      return unknownSetting(def.in!._zod.def.type === 'transform' ? def.out! : def.in!, value, path);
    case 'array':
      if (!Array.isArray(value)) return undefined;
      for (const [index, item] of value.entries()) {
        const found = unknownSetting(def.element!, item, [...path, String(index)]);
        if (found) return found;
      }
      return undefined;
    case 'object': {
      if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
      const known = Object.keys(def.shape!);
      for (const [key, child] of Object.entries(value)) {
        if (!known.includes(key)) return { path: [...path, key], near: known.find((candidate) => editDistance(candidate.toLowerCase(), key.toLowerCase()) <= 2) };
        const found = unknownSetting(def.shape![key], child, [...path, key]);
        if (found) return found;
      }
      return undefined;
    }
    default:
      return undefined;
  }
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    previous = current;
  }
  return previous[b.length];
}

function setPath(target: Record<string, unknown>, dotted: string, value: unknown) {
  const keys = dotted.split('.');
  let node = target;
  for (const key of keys.slice(0, -1)) {
    if (typeof node[key] !== 'object' || node[key] === null) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[keys[keys.length - 1]] = value;
}

function mergeInto(target: Record<string, unknown>, source: Record<string, unknown>) {
  for (const [key, value] of Object.entries(source)) {
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      if (typeof target[key] !== 'object' || target[key] === null) target[key] = {};
      mergeInto(target[key] as Record<string, unknown>, value as Record<string, unknown>);
    } else if (value !== undefined) {
      target[key] = value;
    }
  }
}
