// Functions and versions (spec 4.1 management; wire-reference 2): names unique per account, versions
// start INACTIVE, secrets sealed at rest and only their names ever shown, other accounts' functions
// answer 404.
import { randomUUID } from 'node:crypto';
import type { Principal } from '../../domain/principal.ts';
import { decodeCursor, encodeCursor } from '../../domain/pagination.ts';
import { conflict, invalid, notFound } from '../../domain/problem.ts';
import type { SecretBox } from '../../store/encryption.ts';
import { isUniqueViolation } from '../../store/store.ts';
import type { AccountsService } from '../accounts/service.ts';
import type { TelemetryReferenceCheck } from '../telemetries/service.ts';
import { documentOf, pagePositionSchema, secretsOf, type FunctionsRepo, type VersionRow } from './repo.ts';
import type { CreateFunction, FunctionDocument, FunctionRecord, FunctionStatus, Instance, HealthInfo, Secret, UpdateFunction } from './schema.ts';

/** The execution plane's view of running instances; empty until it is wired in. */
export interface ActiveInstances {
  of(versionIds: string[]): Promise<Map<string, Instance[]>>;
  /** Why placement could not give a version all its instances, if it could not. */
  healthInfo(versionId: string): HealthInfo[] | undefined;
}

const noInstances: ActiveInstances = { of: async () => new Map(), healthInfo: () => undefined };

const DEFAULT_INFERENCE_PORT = 8000;
/** The reference's default health path (Triton's readiness endpoint). */
const DEFAULT_HEALTH_URI = '/v2/health/ready';

function render(body: CreateFunction, ids: { functionId: string; versionId: string; ncaId: string; createdAt: string }): FunctionDocument {
  const { secrets, name, functionType, healthUri, ...spec } = body;
  const inferencePort = body.inferencePort ?? DEFAULT_INFERENCE_PORT;
  const health = body.health ?? { protocol: 'HTTP', uri: healthUri ?? DEFAULT_HEALTH_URI, port: inferencePort, timeout: 'PT10S', expectedStatusCode: 200 };
  return {
    id: ids.functionId, ncaId: ids.ncaId, versionId: ids.versionId, name, createdAt: ids.createdAt, ownedByDifferentAccount: false,
    functionType, ...spec, inferencePort, health, healthUri: health.uri,
    telemetries: spec.telemetries as Record<string, string> | undefined,
    ...(secrets?.length ? { secrets: secrets.map((secret) => secret.name) } : {}),
  };
}

export function toFunction(row: VersionRow, instances: Instance[] = [], issues?: HealthInfo[]): FunctionRecord {
  return { ...documentOf(row), status: row.status as FunctionStatus, activeInstances: instances, ...(issues ? { healthInfo: issues } : {}) };
}

/** The same record as toFunction, spliced as text: the stored document plus the live fields. */
function functionJson(row: VersionRow, instances: Instance[] = [], issues?: HealthInfo[]): string {
  const health = issues ? `,"healthInfo":${JSON.stringify(issues)}` : '';
  return `${row.document.slice(0, -1)},"status":${JSON.stringify(row.status)},"activeInstances":${JSON.stringify(instances)}${health}}`;
}

export interface FunctionsServiceOptions {
  repo: FunctionsRepo;
  accounts: AccountsService;
  box: SecretBox;
  instances?: ActiveInstances;
  /** A version's `telemetries` must name telemetries of its account (control/telemetries). */
  checkTelemetries?: TelemetryReferenceCheck;
  now?: () => Date;
}

export function createFunctionsService(options: FunctionsServiceOptions) {
  const { repo, accounts, box } = options;
  const now = options.now ?? (() => new Date());
  let instances = options.instances ?? noInstances;

  function newVersion(functionId: string, ncaId: string, body: CreateFunction): VersionRow {
    const createdAt = now().toISOString();
    const versionId = randomUUID();
    const secrets = body.secrets ?? [];
    return {
      version_id: versionId, function_id: functionId, nca_id: ncaId, name: body.name, function_type: body.functionType,
      status: 'INACTIVE', document: JSON.stringify(render(body, { functionId, versionId, ncaId, createdAt })),
      secrets: secrets.length ? box.encrypt(JSON.stringify(secrets)) : null, created_at: createdAt, updated_at: createdAt,
    };
  }

  async function withInstances(rows: VersionRow[]): Promise<FunctionRecord[]> {
    const running = await instances.of(rows.map((row) => row.version_id));
    return rows.map((row) => toFunction(row, running.get(row.version_id) ?? [], instances.healthInfo(row.version_id)));
  }

  async function rewrite(row: VersionRow, change: (document: FunctionDocument) => void, extra: Partial<VersionRow> = {}): Promise<VersionRow> {
    const document = documentOf(row);
    change(document);
    const changes = { ...extra, document: JSON.stringify(document), updated_at: now().toISOString() };
    await repo.updateVersion(row.version_id, changes);
    return { ...row, ...changes };
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
      await options.checkTelemetries?.(principal.ncaId, body.telemetries);
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
      await options.checkTelemetries?.(principal.ncaId, body.telemetries);
      const version = newVersion(functionId, principal.ncaId, body);
      await repo.insertVersion(version);
      return toFunction(version);
    },

    /**
     * One page of the account's function versions, newest first, as the JSON text of
     * {functions, cursor?}: rows are spliced, not parsed and re-serialised. Only `private` functions
     * exist here (nothing is shared across accounts yet), so `authorized`/`public` alone list nothing.
     */
    async listJson(principal: Principal, query: { visibility?: string[]; limit: number; cursor?: string }): Promise<string> {
      if (query.visibility && !query.visibility.includes('private')) return '{"functions":[]}';
      const after = query.cursor ? decodeCursor(query.cursor, pagePositionSchema) : undefined;
      const rows = await repo.listVersions(principal.ncaId, query.limit + 1, after);
      const page = rows.slice(0, query.limit);
      const running = await instances.of(page.map((row) => row.version_id));
      const functions = page.map((row) => functionJson(row, running.get(row.version_id), instances.healthInfo(row.version_id))).join(',');
      const last = page[page.length - 1];
      const cursor = rows.length > query.limit ? `,"cursor":"${encodeCursor({ createdAt: last.created_at, versionId: last.version_id })}"` : '';
      return `{"functions":[${functions}]${cursor}}`;
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
      const row = await rewrite(await requireVersion(principal.ncaId, functionId, versionId), (document) => {
        if (body.tags !== undefined) document.tags = body.tags;
        if (body.rateLimit !== undefined) document.rateLimit = body.rateLimit;
        if (body.description !== undefined) document.description = body.description;
      });
      return (await withInstances([row]))[0];
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
      const merged = new Map(secretsOf(box, row).map((secret) => [secret.name, secret]));
      for (const secret of secrets) merged.set(secret.name, secret);
      const all = [...merged.values()];
      await rewrite(row, (document) => {
        document.secrets = all.map((secret) => secret.name);
      }, { secrets: box.encrypt(JSON.stringify(all)) });
    },

    /** For the compute plane starting an instance: the version's secrets in the clear. */
    async secretsOf(versionId: string): Promise<Secret[]> {
      const row = await repo.findVersionById(versionId);
      return row ? secretsOf(box, row) : [];
    },

    async setStatus(versionId: string, status: FunctionStatus): Promise<void> {
      await repo.updateVersion(versionId, { status, updated_at: now().toISOString() });
    },
  };
}

export type FunctionsService = ReturnType<typeof createFunctionsService>;
