// Row types of every table, as Kysely sees them. Timestamps are ISO 8601 UTC strings (sortable as text
// on both backends); lists and objects are JSON text; booleans are 0/1 integers.
export interface AccountsTable {
  nca_id: string;
  name: string;
  admin_client_ids: string;
  max_functions: number;
  max_tasks: number;
  max_telemetries: number;
  max_registry_credentials: number;
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

export interface Database {
  accounts: AccountsTable;
  credentials: CredentialsTable;
  settings: SettingsTable;
}

