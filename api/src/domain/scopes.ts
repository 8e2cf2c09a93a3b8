// Scope names (spec 5.2, wire-reference 8) and the defaults each credential type is minted with.

export const functionScopes = [
  'register_function', 'list_functions', 'list_functions_details', 'deploy_function', 'update_function',
  'update_secrets', 'delete_function', 'invoke_function', 'queue_details', 'authorize_clients',
  'manage_telemetries', 'manage_registry_credentials', 'list_cluster_groups', 'cluster-management',
  'account_setup',
] as const;

export const taskScopes = [
  'launch_task', 'list_tasks', 'task_details', 'cancel_task', 'delete_task', 'list_events', 'list_results',
  'update_secrets',
] as const;

export type Scope = (typeof functionScopes)[number] | (typeof taskScopes)[number];

export const knownScopes: ReadonlySet<string> = new Set<string>([...functionScopes, ...taskScopes]);

/** SVC_TOKEN: the default admin issuer role (spec 5.2). */
export const managementTokenScopes: readonly Scope[] = [
  'register_function', 'list_functions', 'list_functions_details', 'deploy_function', 'update_function',
  'update_secrets', 'delete_function', 'manage_telemetries', 'manage_registry_credentials', 'cluster-management',
];

/** SVC_API_KEY defaults. */
export const functionKeyScopes: readonly Scope[] = ['invoke_function', 'list_functions', 'queue_details', 'list_functions_details'];

/** SVC_TASK_API_KEY defaults. */
export const taskKeyScopes: readonly Scope[] = [
  'launch_task', 'list_tasks', 'task_details', 'cancel_task', 'delete_task', 'list_events', 'list_results', 'update_secrets',
];
