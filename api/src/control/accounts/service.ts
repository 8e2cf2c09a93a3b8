// Accounts and their quotas: the bootstrap account, administration (spec 4.2, 5.4), and the one quota
// check every create endpoint calls (spec 7, 8).
import type { Principal } from '../../domain/principal.ts';
import { conflict, forbidden, notFound, Problem } from '../../domain/problem.ts';
import { isUniqueViolation } from '../../store/store.ts';
import type { AccountsRepo, AccountRow } from './repo.ts';
import type { Account, AccountLimits, CreateAccount } from './schema.ts';

export interface BootstrapAccount {
  ncaId: string;
  name: string;
  adminClientIds: string[];
  limits: {
    maxFunctions: number; maxTasks: number; maxTelemetries: number; maxRegistryCredentials: number; maxInstances: number;
    maxAssets: number; maxAssetBytes: number;
  };
}

export type QuotaKind = 'functions' | 'tasks' | 'telemetries' | 'registryCredentials' | 'instances' | 'assets';

type LimitColumn = 'max_functions' | 'max_tasks' | 'max_telemetries' | 'max_registry_credentials' | 'max_instances' | 'max_assets' | 'max_asset_bytes';

const quotas: Record<QuotaKind, { column: LimitColumn; what: string }> = {
  functions: { column: 'max_functions', what: 'the number of functions allowed' },
  tasks: { column: 'max_tasks', what: 'the number of tasks allowed' },
  telemetries: { column: 'max_telemetries', what: 'the number of telemetries allowed' },
  registryCredentials: { column: 'max_registry_credentials', what: 'the number of registry credentials allowed' },
  instances: { column: 'max_instances', what: 'the number of instances allowed' },
  assets: { column: 'max_assets', what: 'the number of assets allowed' },
};

export function toAccount(row: AccountRow): Account {
  return {
    ncaId: row.nca_id,
    name: row.name,
    adminClientIds: row.admin_client_ids,
    maxFunctionsAllowed: row.max_functions,
    maxTasksAllowed: row.max_tasks,
    maxTelemetriesAllowed: row.max_telemetries,
    maxRegistryCredentialsAllowed: row.max_registry_credentials,
    maxInstancesAllowed: row.max_instances,
    maxAssetsAllowed: row.max_assets,
    maxAssetBytesAllowed: row.max_asset_bytes,
  };
}

function limitColumns(limits: AccountLimits): Partial<Pick<AccountRow, LimitColumn>> {
  const columns: Partial<Pick<AccountRow, LimitColumn>> = {};
  if (limits.maxFunctionsAllowed !== undefined) columns.max_functions = limits.maxFunctionsAllowed;
  if (limits.maxTasksAllowed !== undefined) columns.max_tasks = limits.maxTasksAllowed;
  if (limits.maxTelemetriesAllowed !== undefined) columns.max_telemetries = limits.maxTelemetriesAllowed;
  if (limits.maxRegistryCredentialsAllowed !== undefined) columns.max_registry_credentials = limits.maxRegistryCredentialsAllowed;
  if (limits.maxInstancesAllowed !== undefined) columns.max_instances = limits.maxInstancesAllowed;
  if (limits.maxAssetsAllowed !== undefined) columns.max_assets = limits.maxAssetsAllowed;
  if (limits.maxAssetBytesAllowed !== undefined) columns.max_asset_bytes = limits.maxAssetBytesAllowed;
  return columns;
}

export function createAccountsService(repo: AccountsRepo, now: () => Date = () => new Date()) {
  /** Installation-wide admins reach every account; an account_setup key only its own. */
  function assertMayAdminister(principal: Principal, ncaId: string) {
    if (principal.ncaId !== '*' && principal.ncaId !== ncaId) {
      throw forbidden(`The credential may administer account '${principal.ncaId}' only`);
    }
  }

  async function requireAccount(ncaId: string): Promise<AccountRow> {
    const row = await repo.find(ncaId);
    if (!row) throw notFound(`Account '${ncaId}' does not exist`);
    return row;
  }

  return {
    requireAccount,

    /** Every account's maxInstancesAllowed (placement enforces them each round). */
    async instanceLimits(): Promise<Map<string, number>> {
      return new Map((await repo.instanceLimits()).map((row) => [row.nca_id, row.max_instances]));
    },

    /** First start creates the account; an existing account counts as success and keeps its limits. */
    async ensureBootstrapAccount(bootstrap: BootstrapAccount): Promise<{ account: Account; created: boolean }> {
      const existing = await repo.find(bootstrap.ncaId);
      if (existing) return { account: toAccount(existing), created: false };
      const at = now().toISOString();
      const row: AccountRow = {
        nca_id: bootstrap.ncaId,
        name: bootstrap.name,
        admin_client_ids: bootstrap.adminClientIds,
        max_functions: bootstrap.limits.maxFunctions,
        max_tasks: bootstrap.limits.maxTasks,
        max_telemetries: bootstrap.limits.maxTelemetries,
        max_registry_credentials: bootstrap.limits.maxRegistryCredentials,
        max_instances: bootstrap.limits.maxInstances,
        max_assets: bootstrap.limits.maxAssets,
        max_asset_bytes: bootstrap.limits.maxAssetBytes,
        created_at: at,
        updated_at: at,
      };
      try {
        await repo.insert(row);
        return { account: toAccount(row), created: true };
      } catch (error) {
        if (!isUniqueViolation(error)) throw error;
        return { account: toAccount(await requireAccount(bootstrap.ncaId)), created: false };
      }
    },

    async get(principal: Principal, ncaId: string): Promise<Account> {
      assertMayAdminister(principal, ncaId);
      return toAccount(await requireAccount(ncaId));
    },

    async list(principal: Principal): Promise<Account[]> {
      const rows = await repo.list();
      return rows.filter((row) => principal.ncaId === '*' || row.nca_id === principal.ncaId).map(toAccount);
    },

    async create(principal: Principal, ncaId: string, input: CreateAccount, defaults: BootstrapAccount['limits']): Promise<Account> {
      if (principal.ncaId !== '*') throw forbidden('Only an installation administrator may create accounts');
      const at = now().toISOString();
      const row: AccountRow = {
        nca_id: ncaId,
        name: input.name ?? ncaId,
        admin_client_ids: input.adminClientIds ?? [],
        max_functions: input.maxFunctionsAllowed ?? defaults.maxFunctions,
        max_tasks: input.maxTasksAllowed ?? defaults.maxTasks,
        max_telemetries: input.maxTelemetriesAllowed ?? defaults.maxTelemetries,
        max_registry_credentials: input.maxRegistryCredentialsAllowed ?? defaults.maxRegistryCredentials,
        max_instances: input.maxInstancesAllowed ?? defaults.maxInstances,
        max_assets: input.maxAssetsAllowed ?? defaults.maxAssets,
        max_asset_bytes: input.maxAssetBytesAllowed ?? defaults.maxAssetBytes,
        created_at: at,
        updated_at: at,
      };
      try {
        await repo.insert(row);
      } catch (error) {
        if (isUniqueViolation(error)) throw conflict(`Account '${ncaId}' already exists`);
        throw error;
      }
      return toAccount(row);
    },

    async updateLimits(principal: Principal, ncaId: string, limits: AccountLimits): Promise<Account> {
      assertMayAdminister(principal, ncaId);
      await requireAccount(ncaId);
      const row = await repo.update(ncaId, { ...limitColumns(limits), updated_at: now().toISOString() });
      return toAccount(row!);
    },

    /**
     * Refuses a create when the account's `existing` resources of `kind` plus `adding` would pass its
     * limit. Status 400 as in the reference, code quota-exceeded; raise the limit with PATCH.
     */
    async checkQuota(ncaId: string, kind: QuotaKind, existing: number, adding = 1): Promise<void> {
      const row = await requireAccount(ncaId);
      const limit = row[quotas[kind].column];
      if (existing + adding > limit) {
        throw new Problem('quota-exceeded', `Account '${ncaId}': Reached or exceeded the max limit for ${quotas[kind].what}: ${limit}.`);
      }
    },
  };
}

export type AccountsService = ReturnType<typeof createAccountsService>;
