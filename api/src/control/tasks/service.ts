// Tasks as the API sees them (spec 4.4; wire-reference 7): launch into the queue, listing, details,
// cancel, delete, events, results and secrets. Other accounts' tasks answer 404. Secret values are sealed
// at rest and never leave in a response, an event or a log line; only their names are shown.
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import { z } from 'zod';
import type { Principal } from '../../domain/principal.ts';
import { createdAtPosition, decodeCursor, encodeCursor } from '../../domain/pagination.ts';
import { badRequest, conflict, invalid, notFound, unauthorized } from '../../domain/problem.ts';
import type { SecretBox } from '../../store/encryption.ts';
import type { AccountsService } from '../accounts/service.ts';
import type { ClustersService } from '../clusters/service.ts';
import { documentOf, gpuSpecificationOf, secretsOf, type TaskResultRow, type TaskRow, type TasksRepo } from './repo.ts';
import { isSafeKey, type BlobStore } from '../../store/blobs.ts';
import type { TelemetryReferenceCheck } from '../telemetries/service.ts';
import { statusEvent, type TaskScheduler } from './scheduler.ts';
import {
  inFlightStatuses, terminalStatuses, type CreateTask, type Task, type TaskDocument, type TaskEvent, type TaskInstance, type TaskResult,
  type TaskSecret, type TaskStatus,
} from './schema.ts';

export interface TasksServiceOptions {
  repo: TasksRepo;
  scheduler: TaskScheduler;
  accounts: AccountsService;
  clusters: ClustersService;
  box: SecretBox;
  results: BlobStore;
  /** Largest result file an agent may upload. */
  maxResultBytes: number;
  /** A task's `telemetries` must name telemetries of its account (control/telemetries). */
  checkTelemetries?: TelemetryReferenceCheck;
  now?: () => Date;
}

const eventPosition = z.object({ seq: z.number().int() });

interface Page {
  limit: number;
  cursor?: string;
}

function render(body: CreateTask, ids: { id: string; ncaId: string; createdAt: string }): TaskDocument {
  const { secrets, gpuSpecification, helmChart: _helm, ...spec } = body;
  const { configuration: _configuration, helmValidationPolicy: _policy, ...gpu } = gpuSpecification;
  return {
    id: ids.id, ncaId: ids.ncaId, ...spec, gpuSpecification: gpu, createdAt: ids.createdAt,
    telemetries: spec.telemetries as Record<string, string> | undefined,
    ...(secrets?.length ? { secrets: secrets.map((secret) => secret.name) } : {}),
  };
}

function instanceState(row: TaskRow): TaskInstance['instanceState'] {
  if (row.instance_state === 'RUNNING') return 'RUNNING';
  if (terminalStatuses.has(row.status as TaskStatus)) return 'TERMINATED';
  return row.instance_state === null || row.instance_state === 'STARTING' ? 'STARTING' : 'TERMINATED';
}

/** Status, progress, health and instance: the parts of a task that change as it runs. */
function liveFields(row: TaskRow, document: { gpuSpecification: { gpu: string; instanceType: string } }) {
  const { gpu, instanceType } = document.gpuSpecification;
  const instances: TaskInstance[] = row.instance_id ? [{
    instanceId: row.instance_id, taskId: row.id, instanceType, instanceState: instanceState(row), ncaId: row.nca_id, gpu,
    ...(row.backend ? { backend: row.backend } : {}), ...(row.location ? { location: row.location } : {}),
    instanceCreatedAt: row.instance_created_at ?? row.created_at, instanceUpdatedAt: row.updated_at,
  }] : [];
  return {
    status: row.status as TaskStatus,
    healthInfo: { gpu, instanceType, ...(row.backend ? { backend: row.backend } : {}), ...(row.error ? { error: row.error } : {}) },
    ...(row.percent_complete !== null ? { percentComplete: row.percent_complete } : {}),
    ...(row.last_heartbeat_at ? { lastHeartbeatAt: row.last_heartbeat_at } : {}),
    lastUpdatedAt: row.updated_at,
    instances,
  };
}

export function toTask(row: TaskRow): Task {
  const document = documentOf(row);
  return { ...document, ...liveFields(row, document) };
}

/** The same record as toTask, spliced as text: the stored document plus the live fields. */
function taskJson(row: TaskRow, gpu: { gpu: string; instanceType: string }): string {
  const live = JSON.stringify(liveFields(row, { gpuSpecification: gpu }));
  return `${row.document.slice(0, -1)},${live.slice(1)}`;
}

const resultsPrefix = (row: TaskRow) => `${row.nca_id}/${documentOf(row).resultsLocation ?? 'tasks'}/${row.id}`;

function toResult(row: TaskResultRow): TaskResult {
  return {
    resultId: row.result_id, taskId: row.task_id, ncaId: row.nca_id, name: row.name,
    metadata: row.metadata, createdAt: row.created_at, size: Number(row.size),
    downloadUrl: `/v1/svct/tasks/${row.task_id}/results/${row.result_id}/content`,
  };
}

export function createTasksService(options: TasksServiceOptions) {
  const { repo, scheduler, accounts, clusters, box, results } = options;
  const now = options.now ?? (() => new Date());

  /** The task in the caller's account; anything else is 404, whoever owns it. */
  async function requireTask(principal: Principal, taskId: string): Promise<TaskRow> {
    const row = await repo.find(principal.ncaId, taskId);
    if (!row) throw notFound(`Task id '${taskId}': not found`);
    return row;
  }

  /** The GPU must be one a cluster the account may use offers (as deployments). */
  async function assertOffered(ncaId: string, gpu: CreateTask['gpuSpecification']) {
    if ((await clusters.offering(ncaId, gpu)).length > 0) return;
    const where = [gpu.backend && `cluster group '${gpu.backend}'`, gpu.clusters?.length && `clusters ${gpu.clusters.join(', ')}`].filter(Boolean).join(' and ');
    throw invalid([{
      field: `gpuSpecification.${gpu.clusters?.length ? 'clusters' : gpu.backend ? 'backend' : 'gpu'}`,
      message: `GPU '${gpu.gpu}' with instance type '${gpu.instanceType}' is not offered by ${where || 'any cluster group the account may use'} (see GET /v2/svc/clusterGroups)`,
    }]);
  }

  return {
    async launch(principal: Principal, body: CreateTask): Promise<Task> {
      // The quota counts tasks in flight (queued, launched, running), as the reference's limit does.
      await accounts.checkQuota(principal.ncaId, 'tasks', await repo.countInFlight(principal.ncaId));
      await assertOffered(principal.ncaId, body.gpuSpecification);
      await options.checkTelemetries?.(principal.ncaId, body.telemetries);
      const createdAt = now().toISOString();
      const id = randomUUID();
      const document = render(body, { id, ncaId: principal.ncaId, createdAt });
      const row: TaskRow = {
        id, nca_id: principal.ncaId, name: body.name, status: 'QUEUED', document: JSON.stringify(document),
        secrets: body.secrets?.length ? box.encrypt(JSON.stringify(body.secrets)) : null, secrets_revision: 1,
        cluster_id: null, node_id: null, backend: null, location: null, instance_id: null, instance_state: null, instance_created_at: null,
        percent_complete: null, last_heartbeat_at: null, error: null, created_at: createdAt, launched_at: null, updated_at: createdAt,
      };
      const { gpu, instanceType } = body.gpuSpecification;
      await repo.insert(row, `Task created with status 'QUEUED': waiting for GPU '${gpu}', instance type '${instanceType}'`);
      void scheduler.schedule();
      return toTask(row);
    },

    /** One page, newest first, as the JSON text of {tasks, limit?, cursor?} (rows spliced, not rebuilt). */
    async listJson(principal: Principal, query: Page & { status?: TaskStatus }): Promise<string> {
      const after = query.cursor ? decodeCursor(query.cursor, createdAtPosition) : undefined;
      const rows = await repo.list(principal.ncaId, query.limit + 1, query.status, after);
      const page = rows.slice(0, query.limit);
      const tasks = page.map((row) => taskJson(row, gpuSpecificationOf(row))).join(',');
      const last = page[page.length - 1];
      const more = rows.length > query.limit ? `,"limit":${query.limit},"cursor":"${encodeCursor({ createdAt: last.created_at, id: last.id })}"` : '';
      return `{"tasks":[${tasks}]${more}}`;
    },

    /** For the telemetry export: a task's account, the telemetries it names and its secrets (to blank out of its lines). */
    async telemetriesOf(taskId: string) {
      const row = await repo.findById(taskId);
      if (!row) return undefined;
      return { ncaId: row.nca_id, telemetries: documentOf(row).telemetries ?? {}, secrets: secretsOf(box, row) };
    },

    async bulk(principal: Principal, taskIds: string[]) {
      const rows = await repo.basics(principal.ncaId, [...new Set(taskIds)]);
      return { ncaId: principal.ncaId, tasks: rows.map((row) => ({ id: row.id, name: row.name, status: row.status as TaskStatus })) };
    },

    async get(principal: Principal, taskId: string): Promise<Task> {
      return toTask(await requireTask(principal, taskId));
    },

    async cancel(principal: Principal, taskId: string): Promise<Task> {
      const row = await requireTask(principal, taskId);
      const refuse = (status: string) => badRequest(`Invalid request: Cannot cancel a Task with '${status}' terminal status`);
      if (terminalStatuses.has(row.status as TaskStatus)) throw refuse(row.status);
      const at = now().toISOString();
      const canceled = await repo.transition(taskId, inFlightStatuses, { status: 'CANCELED', updated_at: at }, [statusEvent(row.status, 'CANCELED')]);
      if (!canceled) throw refuse((await requireTask(principal, taskId)).status);
      scheduler.withdraw(taskId);
      return toTask(canceled);
    },

    /** Removes the task, its events, results and secrets; a running one is stopped by its agent. */
    async remove(principal: Principal, taskId: string): Promise<void> {
      const row = await requireTask(principal, taskId);
      scheduler.withdraw(taskId);
      await repo.delete(taskId);
      await results.deletePrefix(resultsPrefix(row));
    },

    async events(principal: Principal, taskId: string, query: Page) {
      const row = await requireTask(principal, taskId);
      const after = query.cursor ? decodeCursor(query.cursor, eventPosition).seq : undefined;
      const rows = await repo.events(row.id, query.limit + 1, after);
      const page = rows.slice(0, query.limit);
      const events: TaskEvent[] = page.map((event) => ({
        eventId: event.event_id, taskId: event.task_id, ncaId: event.nca_id, message: event.message, createdAt: event.created_at,
      }));
      return rows.length > query.limit
        ? { events, limit: query.limit, cursor: encodeCursor({ seq: Number(page[page.length - 1].seq) }) }
        : { events };
    },

    async results(principal: Principal, taskId: string, query: Page) {
      const row = await requireTask(principal, taskId);
      const after = query.cursor ? decodeCursor(query.cursor, createdAtPosition) : undefined;
      const rows = await repo.results(row.id, query.limit + 1, after);
      const page = rows.slice(0, query.limit);
      const last = page[page.length - 1];
      return rows.length > query.limit
        ? { results: page.map(toResult), limit: query.limit, cursor: encodeCursor({ createdAt: last.created_at, id: last.result_id }) }
        : { results: page.map(toResult) };
    },

    /** The bytes of one result, for the same key that may list them. */
    async openResult(principal: Principal, taskId: string, resultId: string): Promise<{ body: Readable; size: number; name: string }> {
      await requireTask(principal, taskId);
      const result = await repo.findResult(taskId, resultId);
      const stored = result && await results.get(result.storage_key);
      if (!result || !stored) throw notFound(`Task id '${taskId}': result '${resultId}' not found`);
      return { ...stored, name: result.name };
    },

    /** PUT /v1/svct/secrets/tasks/{taskId}: the named secrets are set (added or replaced); others stay. */
    async updateSecrets(principal: Principal, taskId: string, secrets: TaskSecret[]): Promise<void> {
      const row = await requireTask(principal, taskId);
      const merged = new Map(secretsOf(box, row).map((secret) => [secret.name, secret]));
      for (const secret of secrets) merged.set(secret.name, secret);
      const all = [...merged.values()];
      const document = documentOf(row);
      document.secrets = all.map((secret) => secret.name);
      const sealed = box.encrypt(JSON.stringify(all));
      const revision = row.secrets_revision + 1;
      await repo.update(taskId, { secrets: sealed, secrets_revision: revision, document: JSON.stringify(document), updated_at: now().toISOString() });
      scheduler.secretsChanged(taskId, sealed, revision);
    },

    /**
     * An agent uploading a result file of a task its cluster runs (bearer: the cluster's agent credential,
     * checked here because it is not a user credential). Replaces a result of the same name.
     */
    async storeResult(bearer: string | undefined, taskId: string, name: string, body: Readable): Promise<TaskResult> {
      const cluster = await clusters.authenticateAgent(bearer ?? '');
      if (!cluster) throw unauthorized('A result upload needs the cluster\'s agent credential as bearer');
      const row = await repo.findById(taskId);
      if (!row) throw notFound(`Task id '${taskId}': not found`);
      if (!scheduler.runsOn(taskId, cluster.id)) throw conflict(`Task id '${taskId}' does not run on cluster '${cluster.name}' now`);
      if (documentOf(row).resultHandlingStrategy !== 'UPLOAD') throw conflict(`Task id '${taskId}' keeps no results (resultHandlingStrategy NONE)`);
      if (!isSafeKey(name)) throw invalid([{ field: 'query name', message: 'must be a relative path of plain names (no empty, . or .. segments)' }]);
      const key = `${resultsPrefix(row)}/${name}`;
      const stored = await results.put(key, body, options.maxResultBytes);
      const result: TaskResultRow = {
        result_id: randomUUID(), task_id: taskId, nca_id: row.nca_id, name, size: stored.size,
        metadata: { size: stored.size, sha256: stored.sha256 }, storage_key: key, created_at: now().toISOString(),
      };
      await repo.putResult(result);
      return toResult(result);
    },
  };
}

export type TasksService = ReturnType<typeof createTasksService>;
