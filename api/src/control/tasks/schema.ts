// Task contracts (spec 4.4; wire-reference 7): the reference's create fields and rules, the Task it
// answers, and the shapes of events, results and the listing pages.
import { z } from 'zod';
import { parseDuration } from '../../duration.ts';
import { telemetryReferencesSchema } from '../telemetries/schema.ts';
import { checkSecretNames, functionNameSchema, refuseReservedNames, secretSchema } from '../functions/schema.ts';

const upper = (value: unknown) => (typeof value === 'string' ? value.toUpperCase() : value);

export const taskStatuses = [
  'QUEUED', 'LAUNCHED', 'RUNNING', 'ERRORED', 'CANCELED', 'EXCEEDED_MAX_RUNTIME_DURATION', 'EXCEEDED_MAX_QUEUED_DURATION', 'COMPLETED',
] as const;
export type TaskStatus = (typeof taskStatuses)[number];
export const terminalStatuses: ReadonlySet<TaskStatus> = new Set([
  'ERRORED', 'CANCELED', 'EXCEEDED_MAX_RUNTIME_DURATION', 'EXCEEDED_MAX_QUEUED_DURATION', 'COMPLETED',
]);
export const inFlightStatuses = ['QUEUED', 'LAUNCHED', 'RUNNING'] as const;

export const instanceStates = ['ACTIVE', 'STARTING', 'RUNNING', 'TERMINATED', 'PREEMPTED', 'DELETED'] as const;

export const DEFAULT_MAX_QUEUED_DURATION = 'PT72H';
export const DEFAULT_TERMINATION_GRACE_PERIOD = 'PT1H';

/** A positive ISO 8601 duration (the reference refuses zero-length ones). */
const positiveDuration = z.string().superRefine((value, context) => {
  const ms = parseDuration(value);
  if (ms === undefined) context.addIssue({ code: 'custom', message: 'must be an ISO 8601 duration such as PT2H' });
  else if (ms <= 0) context.addIssue({ code: 'custom', message: 'cannot be of zero length' });
});

const tagList = z.array(z.string().max(128, 'each tag is at most 128 characters').regex(/^[a-zA-Z0-9\-_:=]+$/, 'each tag must match [a-zA-Z0-9-_:=]+'))
  .max(64, 'at most 64 tags');

const environmentEntry = z.object({
  key: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_]*$/, 'must match ^[a-zA-Z0-9][a-zA-Z0-9_]*$'),
  value: z.string().max(32_768),
});

const artifact = z.object({ name: z.string().min(1).max(128), version: z.string().min(1).max(128), uri: z.string().min(1).max(2048) });

export const secretList = z.array(secretSchema).max(128, 'at most 128 secrets').superRefine(checkSecretNames);

export const taskGpuSpecificationSchema = z.object({
  gpu: z.string().min(1, 'is required'),
  instanceType: z.string().min(1, 'is required'),
  /** Cluster group name. */
  backend: z.string().min(1).optional(),
  /** Cluster names or ids. */
  clusters: z.array(z.string().min(1)).max(64).optional(),
  configuration: z.record(z.string(), z.unknown()).optional(),
  helmValidationPolicy: z.record(z.string(), z.unknown()).optional(),
});

/** The reference's results path shape: <org>/[<team>/]<name>. Here: a prefix in the results store. */
const resultsLocationSchema = z.string().max(256).regex(/^[a-zA-Z0-9][a-zA-Z0-9._-]*(\/[a-zA-Z0-9][a-zA-Z0-9._-]*){1,2}$/,
  "must look like '<org>/<name>' or '<org>/<team>/<name>'");

const telemetriesSchema = telemetryReferencesSchema.refine((value) => value.logsTelemetryId || value.metricsTelemetryId || value.tracesTelemetryId,
  'must name at least one telemetry id');

export const createTaskSchema = z.object({
  name: functionNameSchema,
  gpuSpecification: taskGpuSpecificationSchema,
  containerImage: z.string().min(1).max(512).regex(/^[^\s]+$/, 'must be an image reference without spaces').optional(),
  containerArgs: z.string().max(4096).optional(),
  containerEnvironment: z.array(environmentEntry).max(128).superRefine(refuseReservedNames((entry) => entry.key, 'key')).optional(),
  helmChart: z.string().url('must be a URL').optional(),
  models: z.array(artifact).max(32).optional(),
  resources: z.array(artifact).max(32).optional(),
  tags: tagList.optional(),
  description: z.string().max(256, 'at most 256 characters').optional(),
  maxRuntimeDuration: positiveDuration.optional(),
  maxQueuedDuration: positiveDuration.default(DEFAULT_MAX_QUEUED_DURATION),
  terminationGracePeriodDuration: positiveDuration.optional(),
  resultHandlingStrategy: z.preprocess(upper, z.enum(['UPLOAD', 'NONE'])).default('UPLOAD'),
  resultsLocation: resultsLocationSchema.optional(),
  secrets: secretList.optional(),
  telemetries: telemetriesSchema.optional(),
}).superRefine((body, context) => {
  const issue = (path: (string | number)[], message: string) => context.addIssue({ code: 'custom', path, message });
  if (body.helmChart) {
    issue(['helmChart'], 'helm chart tasks are not run by this installation; give containerImage');
  } else if (!body.containerImage) {
    issue(['containerImage'], "one of 'containerImage' or 'helmChart' must be specified");
  }
  if (body.gpuSpecification.configuration && Object.keys(body.gpuSpecification.configuration).length > 0) {
    issue(['gpuSpecification', 'configuration'], 'must be empty for a container task');
  }
  if (body.gpuSpecification.helmValidationPolicy) issue(['gpuSpecification', 'helmValidationPolicy'], 'must be empty for a container task');
  // The reference's rule: the grace period cannot exceed the runtime limit.
  const runtime = body.maxRuntimeDuration ? parseDuration(body.maxRuntimeDuration) : undefined;
  const grace = body.terminationGracePeriodDuration ? parseDuration(body.terminationGracePeriodDuration) : undefined;
  if (runtime !== undefined && grace !== undefined && grace > runtime) {
    issue(['terminationGracePeriodDuration'], `cannot exceed maxRuntimeDuration (${body.maxRuntimeDuration})`);
  }
}).transform((body) => ({
  ...body,
  // Unstated, the grace period is an hour, cut to the runtime limit so a short task is valid as written.
  terminationGracePeriodDuration: body.terminationGracePeriodDuration ?? shorterOf(DEFAULT_TERMINATION_GRACE_PERIOD, body.maxRuntimeDuration),
}));

function shorterOf(duration: string, limit: string | undefined): string {
  if (!limit) return duration;
  return (parseDuration(limit) ?? Infinity) < (parseDuration(duration) ?? Infinity) ? limit : duration;
}

export const updateTaskSecretsSchema = z.object({ secrets: secretList.min(1, 'must hold at least one secret') });

export const taskInstanceSchema = z.object({
  instanceId: z.string(),
  taskId: z.string(),
  instanceType: z.string(),
  instanceState: z.enum(instanceStates),
  ncaId: z.string(),
  gpu: z.string(),
  backend: z.string().optional(),
  location: z.string().optional(),
  instanceCreatedAt: z.string(),
  instanceUpdatedAt: z.string(),
}).meta({ id: 'TaskInstance' });

export const taskSchema = z.object({
  id: z.string(),
  ncaId: z.string(),
  name: z.string(),
  status: z.enum(taskStatuses),
  gpuSpecification: taskGpuSpecificationSchema.omit({ configuration: true, helmValidationPolicy: true }),
  containerImage: z.string().optional(),
  containerArgs: z.string().optional(),
  containerEnvironment: z.array(environmentEntry).optional(),
  models: z.array(artifact).optional(),
  resources: z.array(artifact).optional(),
  tags: z.array(z.string()).optional(),
  description: z.string().optional(),
  resultHandlingStrategy: z.enum(['UPLOAD', 'NONE']),
  resultsLocation: z.string().optional(),
  maxRuntimeDuration: z.string().optional(),
  maxQueuedDuration: z.string(),
  terminationGracePeriodDuration: z.string(),
  healthInfo: z.object({
    gpu: z.string(), instanceType: z.string(), backend: z.string().optional(), error: z.string().optional(),
  }).optional(),
  /** Names only; values are never returned. */
  secrets: z.array(z.string()).optional(),
  percentComplete: z.number().int().optional(),
  lastHeartbeatAt: z.string().optional(),
  lastUpdatedAt: z.string(),
  telemetries: z.record(z.string(), z.string()).optional(),
  createdAt: z.string(),
  instances: z.array(taskInstanceSchema),
}).meta({ id: 'Task' });

/** What a task stores (tasks.document): the Task minus what changes as it runs. */
export const taskDocumentSchema = taskSchema.omit({
  status: true, instances: true, healthInfo: true, percentComplete: true, lastHeartbeatAt: true, lastUpdatedAt: true,
});

export const taskResponse = z.object({ task: taskSchema });
export const taskListResponse = z.object({ tasks: z.array(taskSchema), limit: z.number().int().optional(), cursor: z.string().optional() });

const limit = z.coerce.number().int().min(1, 'must be 1-1000').max(1000, 'must be 1-1000').default(10);
export const pageQuery = z.object({ limit, cursor: z.string().optional() });
export const listTasksQuery = pageQuery.extend({ status: z.preprocess(upper, z.enum(taskStatuses)).optional() });

export const bulkTasksSchema = z.object({
  taskIds: z.array(z.guid('must be a task id (UUID)')).min(1, 'must hold at least one task id').max(1000, 'at most 1000 task ids'),
});
export const bulkTasksResponse = z.object({
  ncaId: z.string(),
  tasks: z.array(z.object({ id: z.string(), name: z.string(), status: z.enum(taskStatuses) })),
});

export const taskEventSchema = z.object({
  eventId: z.string(), taskId: z.string(), ncaId: z.string(), message: z.string(), createdAt: z.string(),
}).meta({ id: 'TaskEvent' });
export const taskEventsResponse = z.object({ events: z.array(taskEventSchema), limit: z.number().int().optional(), cursor: z.string().optional() });

export const taskResultSchema = z.object({
  resultId: z.string(),
  taskId: z.string(),
  ncaId: z.string(),
  name: z.string(),
  metadata: z.record(z.string(), z.unknown()),
  createdAt: z.string(),
  /** Bytes (also in metadata.size). */
  size: z.number().int(),
  /** GET it with the same task key (list_results). */
  downloadUrl: z.string(),
}).meta({ id: 'TaskResult' });
export const taskResultsResponse = z.object({ results: z.array(taskResultSchema), limit: z.number().int().optional(), cursor: z.string().optional() });

export const taskParams = z.object({ taskId: z.guid('must be a task id (UUID)') });
export const resultParams = taskParams.extend({ resultId: z.guid('must be a result id (UUID)') });
export const getTaskQuery = z.object({ includeSecrets: z.enum(['true', 'false']).optional() });
export const resultUploadQuery = z.object({ name: z.string().min(1, 'is required').max(1024, 'at most 1024 characters') });
export const resultUploadResponse = z.object({ result: taskResultSchema });

export type CreateTask = z.infer<typeof createTaskSchema>;
export type Task = z.infer<typeof taskSchema>;
export type TaskDocument = z.infer<typeof taskDocumentSchema>;
export type TaskInstance = z.infer<typeof taskInstanceSchema>;
export type TaskEvent = z.infer<typeof taskEventSchema>;
export type TaskResult = z.infer<typeof taskResultSchema>;
export type TaskSecret = z.infer<typeof secretSchema>;
