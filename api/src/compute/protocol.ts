// The agent link: what the control plane and a cluster's worker agent say to each other over one
// WebSocket (GET /v1/agents/link on the api host, bearer = the cluster's agent credential). The control
// plane always sends the whole desired set, so a reconnecting agent resyncs from one message.
// One zod schema per message, decoded by both ends (control/agents/hub.ts, link.ts): the types are
// what the schemas accept.
import { z } from 'zod';

export const AGENT_LINK_PATH = '/v1/agents/link';

/** Where a remote agent uploads a task's result files (PUT, bearer = the cluster's agent credential). */
export const TASK_RESULT_UPLOAD_PATH = '/v1/agents/tasks/{taskId}/results';

const instanceTypeOffer = z.object({ name: z.string(), description: z.string().optional(), default: z.boolean().optional() });

export const gpuOfferSchema = z.object({
  name: z.string(),
  capacity: z.number().int().optional(),
  instanceTypes: z.array(instanceTypeOffer),
});

/** Where an instance listens, as reachable from the invocation plane. */
const portMapSchema = z.object({
  inference: z.number().int(),
  health: z.number().int(),
  /** STREAMING functions: the control server (CONTROL_SERVER_PORT). */
  control: z.number().int().optional(),
  /** STREAMING functions: the signaling server (STREAMING_SERVER_PORT). */
  streaming: z.number().int().optional(),
  /** STREAMING functions: UDP media ports, inclusive (STREAMING_PORT_BINDING_RANGE). */
  udpRange: z.tuple([z.number().int(), z.number().int()]).optional(),
});

export const endpointSchema = z.object({
  host: z.string(),
  ports: portMapSchema,
  /** Directory on the agent's host under which each request gets <requestId>/ for progress, assets and large output. */
  outputDir: z.string().optional(),
  /**
   * The instance has a network namespace of its own although `host` is on the host's loopback (a container
   * whose ports are published there): its 127.0.0.1 is not the platform's.
   */
  ownLoopback: z.boolean().optional(),
  /** The agent's result keeper (compute/keeper.ts), as an origin: several API replicas send requests through it. */
  keeper: z.string().optional(),
});

const healthCheckSchema = z.object({
  protocol: z.enum(['HTTP', 'GRPC']),
  uri: z.string(),
  port: z.number().int(),
  /** ISO 8601 duration, e.g. PT10S. */
  timeout: z.string(),
  expectedStatusCode: z.number().int(),
});

const environmentSchema = z.array(z.object({ key: z.string(), value: z.string() }));
const secretsSchema = z.array(z.object({ name: z.string(), value: z.unknown() }));
const registryAuthSchema = z.object({ hostname: z.string(), secret: z.string() });
/** What the instance type grants (the cluster's cpuCores, systemMemory); the agent caps the instance to it. */
const resourcesSchema = z.object({ cpuCores: z.number().positive().optional(), memoryBytes: z.number().int().positive().optional() });

/** One instance the control plane wants running on this agent's cluster. */
export const instanceSpecSchema = z.object({
  instanceId: z.string(),
  ncaId: z.string(),
  functionId: z.string(),
  functionVersionId: z.string(),
  functionName: z.string(),
  functionType: z.enum(['DEFAULT', 'STREAMING']),
  gpu: z.string(),
  instanceType: z.string(),
  /** Cluster group name (the reference's backend). */
  backend: z.string(),
  containerImage: z.string().optional(),
  containerArgs: z.string().optional(),
  containerEnvironment: environmentSchema,
  secrets: secretsSchema,
  inferenceUrl: z.string(),
  inferencePort: z.number().int(),
  health: healthCheckSchema,
  /** How long a starting instance may take to pass its first health check. */
  startupGracePeriodMs: z.number(),
  /** Credential for the registry of containerImage, when the account has one (docker runtime pulls). */
  registryAuth: registryAuthSchema.optional(),
  resources: resourcesSchema.optional(),
  /**
   * 'task': a run-to-completion task (its TaskSpec turned into an instance for the runtime): no ports are
   * allocated or published, no health check runs, and the port contract is not in its environment.
   */
  workload: z.enum(['function', 'task']).optional(),
});

export const instanceStates = [
  'STARTING', // launched, not yet healthy
  'RUNNING', // healthy: takes requests
  'UNHEALTHY', // was healthy, failing checks; about to be restarted
  'RESTARTING', // waiting out the back-off before the next start
  'FAILED', // cannot be started (unknown image, bad spec); not retried
  'EXITED', // ended on its own with code 0 (a streaming container after its session)
  'STOPPED', // stopped because it is no longer desired
] as const;

const timestamp = z.string();
/** Last lines an instance or task wrote, on failure. */
const logTail = z.array(z.string()).optional();

export const instanceReportSchema = z.object({
  instanceId: z.string(),
  functionVersionId: z.string(),
  state: z.enum(instanceStates),
  endpoint: endpointSchema.optional(),
  restarts: z.number().int(),
  exitCode: z.number().int().nullable().optional(),
  /** Why, in one line (never a secret). */
  message: z.string().optional(),
  logTail,
  updatedAt: timestamp,
});

const progressReportSchema = z.object({
  requestId: z.string(),
  instanceId: z.string(),
  percent: z.number(),
  partialResponse: z.unknown().optional(),
});

/** One task the control plane wants run to completion on this agent's cluster (wire-reference 7). */
export const taskSpecSchema = z.object({
  taskId: z.string(),
  /** The task's instance id: the runtime's instance, and SVC_INSTANCE_ID. */
  instanceId: z.string(),
  ncaId: z.string(),
  name: z.string(),
  gpu: z.string(),
  instanceType: z.string(),
  backend: z.string(),
  containerImage: z.string(),
  containerArgs: z.string().optional(),
  containerEnvironment: environmentSchema,
  secrets: secretsSchema,
  /** Stop it (SIGTERM, kill after the grace period) once it has run this long; none when absent. */
  maxRuntimeMs: z.number().optional(),
  terminationGracePeriodMs: z.number(),
  /** UPLOAD: files under SVC_RESULTS_DIR are uploaded before the task is reported ended; NONE: nothing kept. */
  resultHandlingStrategy: z.enum(['UPLOAD', 'NONE']),
  /** Grows when the spec changes under the same id (secrets updated): the agent refreshes the secrets file. */
  revision: z.number().int(),
  registryAuth: registryAuthSchema.optional(),
  resources: resourcesSchema.optional(),
});

export const taskRunStates = [
  'STARTING', // received; the runtime is starting it
  'RUNNING', // its process (container) runs
  'COMPLETED', // exited with code 0 (results uploaded)
  'ERRORED', // could not start, exited non-zero or was killed
  'EXCEEDED_MAX_RUNTIME_DURATION', // stopped by the agent after maxRuntimeMs
  'STOPPED', // stopped because it is no longer desired (canceled or deleted)
] as const;

export const taskReportSchema = z.object({
  taskId: z.string(),
  instanceId: z.string(),
  state: z.enum(taskRunStates),
  /** 0-100 from the task's progress file, when it wrote one. */
  percentComplete: z.number().optional(),
  /** When the agent last saw the progress file change. */
  lastHeartbeatAt: timestamp.optional(),
  exitCode: z.number().int().nullable().optional(),
  message: z.string().optional(),
  logTail,
  /** Results uploaded (UPLOAD), reported with the final state. */
  results: z.number().int().optional(),
  updatedAt: timestamp,
});

/**
 * Input assets of one request, to be put in <outputDir>/<requestId>/assets/<assetId> of the instance before
 * the request reaches it. `path` is a signed download path on the api host (no credential needed).
 */
/**
 * Placement's term (compute.placement 'elected': the placement lease's epoch), on every message the control
 * plane sends when it has one. An agent refuses a message of a term older than the newest it has seen: it
 * comes from a replica whose placement has been taken over (docs/scale-out.md, "Placement").
 */
const term = { epoch: z.number().int().nonnegative().optional() };

const stageSchema = z.object({
  type: z.literal('stage'),
  ...term,
  requestId: z.string(),
  instanceId: z.string(),
  assets: z.array(z.object({ assetId: z.string(), path: z.string() })),
});

/*
 * Logs (docs/api.md, "Logs"): the output of the instances of one function version, or of one task (whose
 * instance spec carries the task id as functionVersionId), as the agent keeps it (compute/output-logs.ts).
 * The control plane asks with `logs`; the agent answers with `log-lines` for that streamId: the kept lines
 * (oldest first, in batches, the last with `caughtUp`), then, when following, each new line as it is
 * written, until `logs-stop` or the link's end. Not following, the last batch also has `done`.
 */
export const logLineSchema = z.object({
  instanceId: z.string(),
  timestamp,
  stream: z.enum(['stdout', 'stderr']),
  /** One line, without its newline; the values of the instance's secrets are [redacted]. */
  text: z.string(),
});
const logsRequestSchema = z.object({
  type: z.literal('logs'),
  ...term,
  streamId: z.string(),
  functionVersionId: z.string(),
  instanceId: z.string().optional(),
  /** Only lines written at or after this instant. */
  since: timestamp.optional(),
  /** Only the last N lines kept (then what follows). */
  tail: z.number().int().positive().optional(),
  follow: z.boolean(),
});
const logsStopSchema = z.object({ type: z.literal('logs-stop'), streamId: z.string(), ...term });
const logLinesSchema = z.object({
  type: z.literal('log-lines'),
  streamId: z.string(),
  lines: z.array(logLineSchema),
  caughtUp: z.boolean().optional(),
  done: z.boolean().optional(),
});
export type LogLine = z.infer<typeof logLineSchema>;
export type LogsRequest = z.infer<typeof logsRequestSchema>;
export type LogLinesMessage = z.infer<typeof logLinesSchema>;

// Nodes and leases (docs/scale-out.md, "Hosts"): agents sharing a cluster credential each say their node
// name; the welcome grants the node a lease, renewed by every answer the agent gives over the link (the
// control plane pings it a few times per lease). A lease that lapses makes the node's instances LOST and
// they are placed elsewhere; the next welcome then carries a newer generation, and an agent that held an
// older one stops every instance it still runs (fencing). All optional: an agent without them is node
// `default` of its cluster.
const leaseHeldSchema = z.object({ nodeId: z.string(), generation: z.number().int() });
const leaseGrantSchema = z.object({
  nodeId: z.string(),
  name: z.string(),
  /** Grows each time the lease is granted after it lapsed. */
  generation: z.number().int(),
  /** How long the lease lasts without an answer from the agent. */
  leaseMs: z.number().int().positive(),
});
const helloNode = {
  /** The node name, unique within the cluster (default: the host name); absent: `default`. */
  node: z.string().min(1).max(253).optional(),
  /** The lease this agent held before this link, if any. */
  lease: leaseHeldSchema.optional(),
};

/*
 * The result keeper (compute/keeper.ts; docs/scale-out.md, "Results outlive their replica"): the API
 * replica sending a request went away before its answer ended. The agent says `orphaned`; the control
 * plane answers `keep` (true: the request was answered 202 and is now this node's to finish); the agent
 * then sends the answer, or why there is none, as `kept`.
 */
const keeperMessages = {
  agent: [
    z.object({ type: z.literal('orphaned'), requestId: z.string() }),
    z.object({
      type: z.literal('kept'), requestId: z.string(),
      answer: z.object({ status: z.number().int(), headers: z.record(z.string(), z.union([z.string(), z.array(z.string())])), body: z.base64() }).optional(),
      error: z.string().optional(),
    }),
  ],
  control: [z.object({ type: z.literal('keep'), requestId: z.string(), keep: z.boolean(), ...term })],
} as const;

export const agentMessageSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('hello'), agentVersion: z.string(), runtime: z.string(), gpus: z.array(gpuOfferSchema),
    instances: z.array(instanceReportSchema), tasks: z.array(taskReportSchema).optional(),
    /**
     * Why this agent's instances run without isolation (no sandbox to be had here), so that only the
     * cluster's own account may run them; absent when they are isolated.
     */
    unisolated: z.string().optional(),
    ...helloNode,
    /** Requests whose answers this agent's keeper holds (kept, or waiting for the `keep` verdict). */
    keeping: z.array(z.string()).optional(),
  }),
  z.object({ type: z.literal('instance'), report: instanceReportSchema }),
  z.object({ type: z.literal('progress'), progress: progressReportSchema }),
  z.object({ type: z.literal('task'), report: taskReportSchema }),
  /** The answer to `stage`: the files are in place, or why not. */
  z.object({ type: z.literal('staged'), requestId: z.string(), error: z.string().optional() }),
  logLinesSchema,
  ...keeperMessages.agent,
]);

export const controlMessageSchema = z.discriminatedUnion('type', [
  /** ncaId: the account that owns the cluster (the only one an agent without isolation runs). */
  z.object({
    type: z.literal('welcome'), clusterId: z.string(), clusterName: z.string(), ncaId: z.string(), lease: leaseGrantSchema.optional(),
    /** The node's key for its result keeper's tokens; absent with one API replica (nothing goes through the keeper). */
    keeperKey: z.string().optional(),
    ...term,
  }),
  z.object({ type: z.literal('desired'), instances: z.array(instanceSpecSchema), ...term }),
  /**
   * The whole desired set of tasks by id, like `desired`; `specs` carries only the specs this link has not
   * been sent yet (or whose revision changed), so a set of a thousand tasks is not resent on every change.
   * Ids the agent does not know and gets no spec for are ignored; ids missing from `desired` are stopped
   * (if still running) and forgotten.
   */
  z.object({ type: z.literal('tasks'), desired: z.array(z.string()), specs: z.array(taskSpecSchema), ...term }),
  stageSchema,
  logsRequestSchema,
  logsStopSchema,
  ...keeperMessages.control,
]);

export type GpuOffer = z.infer<typeof gpuOfferSchema>;
export type PortMap = z.infer<typeof portMapSchema>;
export type Endpoint = z.infer<typeof endpointSchema>;
export type HealthCheck = z.infer<typeof healthCheckSchema>;
export type Resources = z.infer<typeof resourcesSchema>;
export type InstanceSpec = z.infer<typeof instanceSpecSchema>;
export type InstanceState = (typeof instanceStates)[number];
export type InstanceReport = z.infer<typeof instanceReportSchema>;
export type ProgressReport = z.infer<typeof progressReportSchema>;
export type TaskSpec = z.infer<typeof taskSpecSchema>;
export type TaskRunState = (typeof taskRunStates)[number];
export type TaskReport = z.infer<typeof taskReportSchema>;
export type StageRequest = z.infer<typeof stageSchema>;
export type LeaseHeld = z.infer<typeof leaseHeldSchema>;
export type LeaseGrant = z.infer<typeof leaseGrantSchema>;
export type AgentMessage = z.infer<typeof agentMessageSchema>;
export type ControlMessage = z.infer<typeof controlMessageSchema>;

/** A frame of the link decoded by `schema`, or why not (text that is not JSON, or a shape the schema refuses). */
export function decodeMessage<T>(schema: z.ZodType<T>, text: string): { message: T } | { error: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { error: 'not JSON' };
  }
  const result = schema.safeParse(parsed);
  if (result.success) return { message: result.data };
  const issue = result.error.issues[0];
  return { error: `${issue.path.join('.') || 'message'}: ${issue.message}` };
}
