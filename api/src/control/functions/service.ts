// Functions and versions (spec 4.1 management; wire-reference 2): names unique per account, versions
// start INACTIVE, secrets sealed at rest and only their names ever shown, other accounts' functions
// answer 404.
import { randomUUID } from 'node:crypto';
import type { Principal } from '../../http/auth.ts';
import { decodeCursor, encodeCursor } from '../../http/pagination.ts';
import { conflict, invalid, notFound } from '../../http/problem.ts';
import type { SecretBox } from '../../store/encryption.ts';
import { isUniqueViolation } from '../../store/store.ts';
import type { AccountsService } from '../accounts/service.ts';
import type { FunctionsRepo, PagePosition, VersionRow } from './repo.ts';
import type { CreateFunction, FunctionRecord, FunctionStatus, Instance, Secret, UpdateFunction } from './schema.ts';

/** The execution plane's view of running instances; empty until it is wired in. */
export interface ActiveInstances {
  of(versionIds: string[]): Promise<Map<string, Instance[]>>;
}

const noInstances: ActiveInstances = { of: async () => new Map() };

const DEFAULT_INFERENCE_PORT = 8000;
/** The reference's default health path (Triton's readiness endpoint). */
const DEFAULT_HEALTH_URI = '/v2/health/ready';

type StoredSpec = Omit<CreateFunction, 'secrets' | 'name' | 'functionType' | 'healthUri'> & {
  inferencePort: number;
  health: NonNullable<CreateFunction['health']>;
};

/** What is stored per version: the request with its defaults made explicit and secrets removed. */
function storedSpec(body: CreateFunction): StoredSpec {
  const { secrets: _secrets, name: _name, functionType: _type, healthUri, ...rest } = body;
  const inferencePort = body.inferencePort ?? DEFAULT_INFERENCE_PORT;
  const health = body.health ?? { protocol: 'HTTP', uri: healthUri ?? DEFAULT_HEALTH_URI, port: inferencePort, timeout: 'PT10S', expectedStatusCode: 200 };
  return { ...rest, inferencePort, health };
}

export function toFunction(row: VersionRow, instances: Instance[] = []): FunctionRecord {
  const spec = JSON.parse(row.spec) as StoredSpec;
  const secretNames = JSON.parse(row.secret_names) as string[];
  return {
    id: row.function_id,
    ncaId: row.nca_id,
    versionId: row.version_id,
    name: row.name,
    status: row.status as FunctionStatus,
    createdAt: row.created_at,
    ownedByDifferentAccount: false,
    functionType: row.function_type as FunctionRecord['functionType'],
    ...spec,
    healthUri: spec.health.uri,
    telemetries: spec.telemetries as Record<string, string> | undefined,
    ...(secretNames.length ? { secrets: secretNames } : {}),
    activeInstances: instances,
  };
}

export interface FunctionsServiceOptions {
  repo: FunctionsRepo;
  accounts: AccountsService;
  box: SecretBox;
  instances?: ActiveInstances;
  now?: () => Date;
}

export function createFunctionsService(options: FunctionsServiceOptions) {
  const { repo, accounts, box } = options;
  const now = options.now ?? (() => new Date());
  let instances = options.instances ?? noInstances;

  function newVersion(functionId: string, ncaId: string, body: CreateFunction): VersionRow {
    const at = now().toISOString();
    const secrets = body.secrets ?? [];
    return {
      version_id: randomUUID(), function_id: functionId, nca_id: ncaId, name: body.name, function_type: body.functionType,
      status: 'INACTIVE', spec: JSON.stringify(storedSpec(body)),
      secrets: secrets.length ? box.encrypt(JSON.stringify(secrets)) : null,
      secret_names: JSON.stringify(secrets.map((secret) => secret.name)), created_at: at, updated_at: at,
    };
  }

  async function withInstances(rows: VersionRow[]): Promise<FunctionRecord[]> {
    const running = await instances.of(rows.map((row) => row.version_id));
    return rows.map((row) => toFunction(row, running.get(row.version_id) ?? []));
  }

  /** The version in the caller's account; anything else is 404, whoever owns it. */
  async function requireVersion(ncaId: string, functionId: string, versionId: string): Promise<VersionRow> {
    const row = await repo.findVersion(ncaId, functionId, versionId);
    if (!row) throw notFound(`Function id '${functionId}', version '${versionId}': not found`);
    return row;
  }

  return {
    requireVersion,

    /** Lets the execution plane supply running instances once it exists. */
    useInstances(source: ActiveInstances) {
      instances = source;
    },

    async create(principal: Principal, body: CreateFunction): Promise<FunctionRecord> {
      await accounts.checkQuota(principal.ncaId, 'functions', await repo.countFunctions(principal.ncaId));
      const functionId = randomUUID();
      const version = newVersion(functionId, principal.ncaId, body);
      try {
        await repo.insertFunction({ id: functionId, nca_id: principal.ncaId, name: body.name, created_at: version.created_at }, version);
      } catch (error) {
        if (isUniqueViolation(error)) {
          throw conflict(`A function named '${body.name}' already exists; add a version with POST /v2/svc/functions/{functionId}/versions`);
        }
        throw error;
      }
      return toFunction(version);
    },

    async createVersion(principal: Principal, functionId: string, body: CreateFunction): Promise<FunctionRecord> {
      const fn = await repo.findFunction(principal.ncaId, functionId);
      if (!fn) throw notFound(`Function id '${functionId}': not found`);
      if (body.name !== fn.name) throw invalid([{ field: 'name', message: `must be the function's name '${fn.name}'` }]);
      const [latest] = await repo.listVersionsOf(principal.ncaId, functionId);
      if (latest && latest.function_type !== body.functionType) {
        throw invalid([{ field: 'functionType', message: `all versions must share the functionType ${latest.function_type}` }]);
      }
      const version = newVersion(functionId, principal.ncaId, body);
      await repo.insertVersion(version);
      return toFunction(version);
    },

    /**
     * One page of the account's function versions, newest first. Only `private` functions exist here
     * (nothing is shared across accounts yet), so `authorized`/`public` alone list nothing.
     */
    async list(principal: Principal, query: { visibility?: string[]; limit: number; cursor?: string }) {
      if (query.visibility && !query.visibility.includes('private')) return { functions: [] as FunctionRecord[] };
      const after = query.cursor ? decodeCursor<{ createdAt: string; versionId: string }>(query.cursor, ['createdAt', 'versionId']) : undefined;
      const rows = await repo.listVersions(principal.ncaId, query.limit + 1, after as PagePosition | undefined);
      const page = rows.slice(0, query.limit);
      const last = page[page.length - 1];
      return {
        functions: await withInstances(page),
        ...(rows.length > query.limit ? { cursor: encodeCursor({ createdAt: last.created_at, versionId: last.version_id }) } : {}),
      };
    },

    async ids(principal: Principal, visibility?: string[]): Promise<string[]> {
      if (visibility && !visibility.includes('private')) return [];
      return repo.listFunctionIds(principal.ncaId);
    },

    async versions(principal: Principal, functionId: string): Promise<FunctionRecord[]> {
      const rows = await repo.listVersionsOf(principal.ncaId, functionId);
      if (rows.length === 0) throw notFound(`Function id '${functionId}': not found`);
      return withInstances(rows);
    },

    async get(principal: Principal, functionId: string, versionId: string): Promise<FunctionRecord> {
      return (await withInstances([await requireVersion(principal.ncaId, functionId, versionId)]))[0];
    },

    async update(principal: Principal, functionId: string, versionId: string, body: UpdateFunction): Promise<FunctionRecord> {
      const row = await requireVersion(principal.ncaId, functionId, versionId);
      const spec = JSON.parse(row.spec) as StoredSpec;
      if (body.tags !== undefined) spec.tags = body.tags;
      if (body.rateLimit !== undefined) spec.rateLimit = body.rateLimit;
      if (body.description !== undefined) spec.description = body.description;
      const changes = { spec: JSON.stringify(spec), updated_at: now().toISOString() };
      await repo.updateVersion(versionId, changes);
      return (await withInstances([{ ...row, ...changes }]))[0];
    },

    async remove(principal: Principal, functionId: string, versionId: string): Promise<void> {
      const row = await requireVersion(principal.ncaId, functionId, versionId);
      if (row.status !== 'INACTIVE') {
        throw conflict(`Function id '${functionId}', version '${versionId}' is ${row.status}; delete its deployment first`);
      }
      await repo.deleteVersion(functionId, versionId);
    },

    /** PUT /v2/svc/secrets/...: the named secrets are set (added or replaced); others stay. */
    async updateSecrets(principal: Principal, functionId: string, versionId: string, secrets: Secret[]): Promise<void> {
      const row = await requireVersion(principal.ncaId, functionId, versionId);
      const merged = new Map((row.secrets ? JSON.parse(box.decrypt(row.secrets)) as Secret[] : []).map((secret) => [secret.name, secret]));
      for (const secret of secrets) merged.set(secret.name, secret);
      const all = [...merged.values()];
      await repo.updateVersion(versionId, {
        secrets: box.encrypt(JSON.stringify(all)), secret_names: JSON.stringify(all.map((secret) => secret.name)), updated_at: now().toISOString(),
      });
    },

    /** For the compute plane starting an instance: the version's secrets in the clear. */
    async secretsOf(versionId: string): Promise<Secret[]> {
      const row = await repo.findVersionById(versionId);
      return row?.secrets ? JSON.parse(box.decrypt(row.secrets)) as Secret[] : [];
    },

    async setStatus(versionId: string, status: FunctionStatus): Promise<void> {
      await repo.updateVersion(versionId, { status, updated_at: now().toISOString() });
    },
  };
}

export type FunctionsService = ReturnType<typeof createFunctionsService>;
