// Row types of every table, as Kysely sees them. Timestamps are ISO 8601 UTC strings (sortable as text
// on both backends); lists and objects are JSON text; booleans are 0/1 integers.
import type { ColumnType } from 'kysely';

export interface AccountsTable {
  nca_id: string;
  name: string;
  admin_client_ids: string;
  max_functions: number;
  max_tasks: number;
  max_telemetries: number;
  max_registry_credentials: number;
  /** Function instances the account may hold at once (placement and deployments enforce it). */
  max_instances: number;
  /** Input assets the account may keep, and their bytes together (bigint: PostgreSQL answers it as text). */
  max_assets: number;
  max_asset_bytes: ColumnType<number | string, number, number>;
  created_at: string;
  updated_at: string;
}

export interface CredentialsTable {
  id: string;
  nca_id: string;
  /** token (SVC_TOKEN), api-key (SVC_API_KEY) or task-key (SVC_TASK_API_KEY). */
  kind: string;
  /** SHA-256 of an opaque key; null for JWT credentials, which are checked by signature. */
  secret_hash: string | null;
  owner_type: string;
  owner_id: string;
  issuer_service: string;
  issuer_id: string;
  description: string;
  audience_service_ids: string;
  authorizations: string;
  scopes: string;
  created_at: string;
  expires_at: string;
  revoked_at: string | null;
}

export interface SettingsTable {
  key: string;
  value: string;
  created_at: string;
}



export interface FunctionsTable {
  id: string;
  nca_id: string;
  name: string;
  created_at: string;
}

export interface FunctionVersionsTable {
  version_id: string;
  function_id: string;
  nca_id: string;
  name: string;
  function_type: string;
  status: string;
  /**
   * The version as the API shows it, minus what changes without a write here (status, instances), as
   * JSON text: rendered once on write so listing is string work, not per-row object building.
   */
  document: string;
  /** Sealed JSON of [{name, value}] (store/encryption.ts); null when the version has none. */
  secrets: string | null;
  created_at: string;
  updated_at: string;
}

export interface DeploymentsTable {
  deployment_id: string;
  function_id: string;
  version_id: string;
  nca_id: string;
  /** GPU specifications, each with its gpuSpecificationId, as JSON. */
  specs: string;
  created_at: string;
  updated_at: string;
}

export interface RegistryCredentialsTable {
  id: string;
  nca_id: string;
  name: string;
  hostname: string;
  artifact_types: string;
  tags: string;
  description: string;
  /** Sealed secret value. */
  secret: string;
  created_at: string;
  updated_at: string;
}

export interface ClustersTable {
  id: string;
  nca_id: string;
  name: string;
  group_id: string;
  group_name: string;
  description: string;
  cloud_provider: string;
  region: string;
  authorized_nca_ids: string;
  capabilities: string;
  attributes: string;
  gpus: string;
  agent_version: string;
  /** SHA-256 of the credential the cluster's agent connects with. */
  agent_credential_hash: string;
  k8s_version: string | null;
  last_connected_at: string | null;
  /** Why the cluster's agent last said its instances run without isolation (only this account's run there); null when isolated. */
  unisolated_reason: string | null;
  created_at: string;
  updated_at: string;
}

export interface InstancesTable {
  instance_id: string;
  nca_id: string;
  function_id: string;
  version_id: string;
  cluster_id: string;
  gpu_spec_id: string;
  gpu: string;
  instance_type: string;
  /** PENDING until its agent first reports it; then the agent's InstanceState. */
  state: string;
  /** 1 while the control plane wants it running; 0 once it should stop. */
  desired: number;
  /** Endpoint JSON from the agent's report. */
  endpoint: string | null;
  restarts: number;
  message: string | null;
  /** The node (agent) of its cluster that runs it; null until one is chosen or adopts it. */
  node_id: string | null;
  created_at: string;
  updated_at: string;
}

/** One agent of a cluster: agents sharing a cluster credential each register a node by name. */
export interface NodesTable {
  id: string;
  cluster_id: string;
  /** The agent's node name (its host name unless configured), unique within the cluster. */
  name: string;
  /** GpuOffer JSON the agent detected, as its last hello said. */
  gpus: string;
  agent_version: string;
  /** Grows each time the node's lease is granted anew after it lapsed: the agent's instances of an older one are stopped. */
  generation: number;
  /** 1 while an agent link of this node is open (as the placement process last wrote it). */
  linked: number;
  /** When its lease ends unless renewed over the link; null before its first link. */
  lease_expires_at: string | null;
  created_at: string;
  updated_at: string;
}

/** Invocations answered 202: durable from that moment until their result is collected. */
export interface InvocationsTable {
  request_id: string;
  nca_id: string;
  function_id: string;
  version_id: string;
  /** queued | running | done */
  state: string;
  /** The request to replay when re-queued: JSON {headers, sse, subject} and the body. */
  request: string;
  body: Buffer;
  /** Result once done: JSON {status, headers} and the body. */
  result: string | null;
  result_body: Buffer | null;
  created_at: string;
  updated_at: string;
}

/**
 * The foundation's tables. Planes with tables of their own declare them beside their migration (the tasks'
 * and the autoscaler's) and reach them with `db.withTables<…>()`; api/src/database.ts lists every migration.
 */
export interface Database {
  accounts: AccountsTable;
  credentials: CredentialsTable;
  settings: SettingsTable;
  functions: FunctionsTable;
  function_versions: FunctionVersionsTable;
  deployments: DeploymentsTable;
  registry_credentials: RegistryCredentialsTable;
  clusters: ClustersTable;
  instances: InstancesTable;
  nodes: NodesTable;
  invocations: InvocationsTable;
}
