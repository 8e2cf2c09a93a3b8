// The agent link: what the control plane and a cluster's worker agent say to each other over one
// WebSocket (GET /v1/agents/link on the api host, bearer = the cluster's agent credential). The control
// plane always sends the whole desired set, so a reconnecting agent resyncs from one message.

export const AGENT_LINK_PATH = '/v1/agents/link';

export interface InstanceTypeOffer {
  name: string;
  description?: string;
  default?: boolean;
}

export interface GpuOffer {
  name: string;
  capacity?: number;
  instanceTypes: InstanceTypeOffer[];
}

/** Where an instance listens, as reachable from the invocation plane. */
export interface PortMap {
  inference: number;
  health: number;
  /** STREAMING functions: the control server (CONTROL_SERVER_PORT). */
  control?: number;
  /** STREAMING functions: the signaling server (STREAMING_SERVER_PORT). */
  streaming?: number;
  /** STREAMING functions: UDP media ports, inclusive (STREAMING_PORT_BINDING_RANGE). */
  udpRange?: [number, number];
}

export interface Endpoint {
  host: string;
  ports: PortMap;
  /** Directory on the agent's host under which each request gets <requestId>/ for progress and large output. */
  outputDir?: string;
}

export interface HealthCheck {
  protocol: 'HTTP' | 'GRPC';
  uri: string;
  port: number;
  /** ISO 8601 duration, e.g. PT10S. */
  timeout: string;
  expectedStatusCode: number;
}

/** One instance the control plane wants running on this agent's cluster. */
export interface InstanceSpec {
  instanceId: string;
  ncaId: string;
  functionId: string;
  functionVersionId: string;
  functionName: string;
  functionType: 'DEFAULT' | 'STREAMING';
  gpu: string;
  instanceType: string;
  /** Cluster group name (the reference's backend). */
  backend: string;
  containerImage?: string;
  containerArgs?: string;
  containerEnvironment: { key: string; value: string }[];
  secrets: { name: string; value: unknown }[];
  inferenceUrl: string;
  inferencePort: number;
  health: HealthCheck;
  /** How long a starting instance may take to pass its first health check. */
  startupGracePeriodMs: number;
  /** Credential for the registry of containerImage, when the account has one (docker runtime pulls). */
  registryAuth?: { hostname: string; secret: string };
  /**
   * 'task': a run-to-completion task (its TaskSpec turned into an instance for the runtime): no ports are
   * allocated or published, no health check runs, and the port contract is not in its environment.
   */
  workload?: 'function' | 'task';
}

export type InstanceState =
  | 'STARTING' // launched, not yet healthy
  | 'RUNNING' // healthy: takes requests
  | 'UNHEALTHY' // was healthy, failing checks; about to be restarted
  | 'RESTARTING' // waiting out the back-off before the next start
  | 'FAILED' // cannot be started (unknown image, bad spec); not retried
  | 'EXITED' // ended on its own with code 0 (a streaming container after its session)
  | 'STOPPED'; // stopped because it is no longer desired

export interface InstanceReport {
  instanceId: string;
  functionVersionId: string;
  state: InstanceState;
  endpoint?: Endpoint;
  restarts: number;
  exitCode?: number | null;
  /** Why, in one line (never a secret). */
  message?: string;
  /** Last lines the instance wrote, on failure. */
  logTail?: string[];
  updatedAt: string;
}

export interface ProgressReport {
  requestId: string;
  instanceId: string;
  percent: number;
  partialResponse?: unknown;
}

/** One task the control plane wants run to completion on this agent's cluster (wire-reference 7). */
export interface TaskSpec {
  taskId: string;
  /** The task's instance id: the runtime's instance, and SVC_INSTANCE_ID. */
  instanceId: string;
  ncaId: string;
  name: string;
  gpu: string;
  instanceType: string;
  backend: string;
  containerImage: string;
  containerArgs?: string;
  containerEnvironment: { key: string; value: string }[];
  secrets: { name: string; value: unknown }[];
  /** Stop it (SIGTERM, kill after the grace period) once it has run this long; none when absent. */
  maxRuntimeMs?: number;
  terminationGracePeriodMs: number;
  /** UPLOAD: files under SVC_RESULTS_DIR are uploaded before the task is reported ended; NONE: nothing kept. */
  resultHandlingStrategy: 'UPLOAD' | 'NONE';
  /** Grows when the spec changes under the same id (secrets updated): the agent refreshes the secrets file. */
  revision: number;
  registryAuth?: { hostname: string; secret: string };
}

export type TaskRunState =
  | 'STARTING' // received; the runtime is starting it
  | 'RUNNING' // its process (container) runs
  | 'COMPLETED' // exited with code 0 (results uploaded)
  | 'ERRORED' // could not start, exited non-zero or was killed
  | 'EXCEEDED_MAX_RUNTIME_DURATION' // stopped by the agent after maxRuntimeMs
  | 'STOPPED'; // stopped because it is no longer desired (canceled or deleted)

export interface TaskReport {
  taskId: string;
  instanceId: string;
  state: TaskRunState;
  /** 0-100 from the task's progress file, when it wrote one. */
  percentComplete?: number;
  /** When the agent last saw the progress file change. */
  lastHeartbeatAt?: string;
  exitCode?: number | null;
  /** Why, in one line (never a secret). */
  message?: string;
  /** Last lines the task wrote, on failure. */
  logTail?: string[];
  /** Results uploaded (UPLOAD), reported with the final state. */
  results?: number;
  updatedAt: string;
}

export type AgentMessage =
  | { type: 'hello'; agentVersion: string; runtime: string; gpus: GpuOffer[]; instances: InstanceReport[]; tasks?: TaskReport[] }
  | { type: 'instance'; report: InstanceReport }
  | { type: 'progress'; progress: ProgressReport }
  | { type: 'task'; report: TaskReport };

export type ControlMessage =
  | { type: 'welcome'; clusterId: string; clusterName: string }
  | { type: 'desired'; instances: InstanceSpec[] }
  /**
   * The whole desired set of tasks by id, like `desired`; `specs` carries only the specs this link has not
   * been sent yet (or whose revision changed), so a set of a thousand tasks is not resent on every change.
   * Ids the agent does not know and gets no spec for are ignored; ids missing from `desired` are stopped
   * (if still running) and forgotten.
   */
  | { type: 'tasks'; desired: string[]; specs: TaskSpec[] };

/** Where a remote agent uploads a task's result files (PUT, bearer = the cluster's agent credential). */
export const TASK_RESULT_UPLOAD_PATH = '/v1/agents/tasks/{taskId}/results';
