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

export type AgentMessage =
  | { type: 'hello'; agentVersion: string; runtime: string; gpus: GpuOffer[]; instances: InstanceReport[] }
  | { type: 'instance'; report: InstanceReport }
  | { type: 'progress'; progress: ProgressReport };

export type ControlMessage =
  | { type: 'welcome'; clusterId: string; clusterName: string }
  | { type: 'desired'; instances: InstanceSpec[] };
