// Function and version contracts (spec 2.1, 4.6 rule 4; wire-reference 2): the reference's fields and
// validation rules, one schema each for requests and responses.
import { z } from 'zod';
import { isReservedEnvironmentName, RESERVED_ENVIRONMENT_MESSAGE } from '../../domain/environment.ts';
import { parseDuration } from '../../duration.ts';
import { telemetryReferencesSchema } from '../telemetries/schema.ts';

const upper = (value: unknown) => (typeof value === 'string' ? value.toUpperCase() : value);

export const functionNameSchema = z.string()
  .min(1, 'must be 1-128 characters long').max(128, 'must be 1-128 characters long')
  .regex(/^[a-zA-Z0-9][a-zA-Z0-9\-_]*$/, 'must match ^[a-zA-Z0-9][a-zA-Z0-9\\-_]*$');

export const isoDurationSchema = z.string()
  .refine((value) => parseDuration(value) !== undefined, 'must be an ISO 8601 duration such as PT10S');

const path = z.string().max(2048).regex(/^\/\S*$/, 'must be a path starting with /');
const port = z.number().int().min(1).max(65535);
const tagList = z.array(z.string().max(128, 'each tag is at most 128 characters').regex(/^[a-zA-Z0-9\-_:=]+$/, 'each tag must match [a-zA-Z0-9-_:=]+'))
  .max(64, 'at most 64 tags');

export const healthSchema = z.object({
  protocol: z.preprocess(upper, z.enum(['HTTP', 'GRPC'])),
  uri: path,
  port,
  timeout: isoDurationSchema,
  expectedStatusCode: z.number().int().min(100).max(599),
});

const environmentEntry = z.object({
  key: z.string().regex(/^[a-zA-Z_][a-zA-Z0-9_]*$/, 'must be an environment variable name'),
  value: z.string().max(32_768),
});

const artifact = z.object({ name: z.string().min(1).max(128), version: z.string().min(1).max(128), uri: z.string().min(1).max(2048) });

export const secretSchema = z.object({
  name: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/, 'must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$').max(48, 'at most 48 characters'),
  value: z.union([z.string(), z.record(z.string(), z.unknown())])
    .refine((value) => JSON.stringify(value).length <= 32_768, 'at most 32768 characters'),
});

/** A secret's name that the agent also sets as an environment variable (others reach only SVC_SECRETS_FILE). */
const ENVIRONMENT_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Refuses, at [index, field], each entry whose name would set an environment variable the platform keeps
 * for itself (domain/environment.ts). For what a tenant sends only: stored documents and secrets are read
 * back with the plain schemas, so what was stored before the rule still decodes.
 */
export function refuseReservedNames<T>(nameOf: (entry: T) => string, field: string) {
  return (entries: T[], context: z.RefinementCtx) => entries.forEach((entry, index) => {
    const name = nameOf(entry);
    if (ENVIRONMENT_NAME.test(name) && isReservedEnvironmentName(name)) {
      context.addIssue({ code: 'custom', path: [index, field], message: RESERVED_ENVIRONMENT_MESSAGE });
    }
  });
}

/** Unique names, none of them a reserved environment variable. */
export function checkSecretNames(secrets: { name: string }[], context: z.RefinementCtx) {
  const seen = new Set<string>();
  secrets.forEach((secret, index) => {
    if (seen.has(secret.name)) context.addIssue({ code: 'custom', path: [index, 'name'], message: `duplicate secret name '${secret.name}'` });
    seen.add(secret.name);
  });
  refuseReservedNames((secret: { name: string }) => secret.name, 'name')(secrets, context);
}

const secretList = z.array(secretSchema).max(128).superRefine(checkSecretNames);

/** A containerEnvironment as a tenant asks for it. */
const requestedEnvironment = z.array(environmentEntry).max(128).superRefine(refuseReservedNames((entry) => entry.key, 'key'));

const rateSchema = z.string().regex(/^\d+-[SMHD](,\d+-[SMHD])*$/i, 'must look like 10-S or 100-M,1000-H');

export const rateLimitSchema = z.object({
  rateLimit: rateSchema,
  exemptedNcaIds: z.array(z.string()).optional(),
  perNcaIdRate: z.record(z.string(), rateSchema).optional(),
  syncCheck: z.boolean().optional(),
  perUserRate: rateSchema.optional(),
});

const telemetriesSchema = telemetryReferencesSchema.refine((value) => value.logsTelemetryId || value.metricsTelemetryId || value.tracesTelemetryId,
  'must name at least one telemetry id');

/** Where the reference streaming container listens unless its environment says otherwise (spec 4.6). */
export const STREAMING_DEFAULTS = { controlPort: 8011, streamingPort: 49100, readyPath: '/v1/streaming/ready' } as const;

export const createFunctionSchema = z.object({
  name: functionNameSchema,
  inferenceUrl: path,
  inferencePort: port.optional(),
  /** Deprecated by the reference in favour of `health`; still accepted. */
  healthUri: path.optional(),
  health: healthSchema.optional(),
  containerImage: z.string().min(1).max(512).regex(/^[^\s]+$/, 'must be an image reference without spaces').optional(),
  containerArgs: z.string().max(4096).optional(),
  containerEnvironment: requestedEnvironment.optional(),
  models: z.array(artifact).max(32).optional(),
  resources: z.array(artifact).max(32).optional(),
  helmChart: z.string().url('must be a URL').optional(),
  helmChartServiceName: z.string().min(1).max(63).optional(),
  apiBodyFormat: z.preprocess(upper, z.enum(['PREDICT_V2', 'CUSTOM'])).default('CUSTOM'),
  functionType: z.preprocess(upper, z.enum(['DEFAULT', 'STREAMING'])).default('DEFAULT'),
  description: z.string().max(256, 'at most 256 characters').optional(),
  tags: tagList.optional(),
  secrets: secretList.optional(),
  rateLimit: rateLimitSchema.optional(),
  telemetries: telemetriesSchema.optional(),
}).superRefine((body, context) => {
  const issue = (path: (string | number)[], message: string) => context.addIssue({ code: 'custom', path, message });
  if (!body.containerImage && !body.models?.length && !body.helmChart) {
    issue(['containerImage'], "one of 'containerImage', 'models' or 'helmChart' must be specified");
  }
  if (body.helmChart) {
    if (body.containerImage) issue(['containerImage'], "cannot be specified together with 'helmChart'");
    if (body.containerArgs) issue(['containerArgs'], "cannot be specified together with 'helmChart'");
    if (body.containerEnvironment) issue(['containerEnvironment'], "cannot be specified together with 'helmChart'");
  }
  if (Boolean(body.helmChart) !== Boolean(body.helmChartServiceName)) {
    issue(['helmChartServiceName'], "'helmChart' and 'helmChartServiceName' must be specified together");
  }
  const modelNames = new Set<string>();
  body.models?.forEach((model, index) => {
    if (modelNames.has(model.name)) issue(['models', index, 'name'], `duplicate model name '${model.name}'`);
    modelNames.add(model.name);
  });
  if (body.functionType === 'STREAMING') checkStreamingContract(body, issue);
});

/** Spec 4.6 rule 4: health on the control port at /v1/streaming/ready, inference on the streaming port. */
function checkStreamingContract(body: { health?: z.infer<typeof healthSchema>; inferencePort?: number; containerEnvironment?: { key: string; value: string }[] },
  issue: (path: (string | number)[], message: string) => void) {
  const env = new Map(body.containerEnvironment?.map((entry) => [entry.key, entry.value]));
  const controlPort = Number(env.get('CONTROL_SERVER_PORT') ?? STREAMING_DEFAULTS.controlPort);
  const streamingPort = Number(env.get('STREAMING_SERVER_PORT') ?? STREAMING_DEFAULTS.streamingPort);
  if (!body.health) {
    issue(['health'], `STREAMING functions need health {uri: '${STREAMING_DEFAULTS.readyPath}', port: ${controlPort}} (the control server port)`);
    return;
  }
  if (body.health.uri !== STREAMING_DEFAULTS.readyPath) issue(['health', 'uri'], `must be ${STREAMING_DEFAULTS.readyPath} for STREAMING functions`);
  if (body.health.port !== controlPort) issue(['health', 'port'], `must be the control server port ${controlPort} (CONTROL_SERVER_PORT) for STREAMING functions`);
  if (body.inferencePort !== streamingPort) issue(['inferencePort'], `must be the streaming server port ${streamingPort} (STREAMING_SERVER_PORT) for STREAMING functions`);
}

export const updateFunctionSchema = z.object({
  tags: tagList.optional(),
  rateLimit: rateLimitSchema.optional(),
  description: z.string().max(256).optional(),
}).refine((body) => body.tags !== undefined || body.rateLimit !== undefined || body.description !== undefined,
  { message: "at least one of 'tags', 'rateLimit' or 'description' must be given", path: ['tags'] });

export const updateSecretsSchema = z.object({ secrets: secretList.min(1, 'must hold at least one secret') });

export const functionStatuses = ['ACTIVE', 'DEPLOYING', 'ERROR', 'INACTIVE', 'DELETED', 'DEGRADED', 'DEGRADING'] as const;

export const instanceSchema = z.object({
  instanceId: z.string(),
  functionId: z.string(),
  functionVersionId: z.string(),
  instanceType: z.string(),
  instanceStatus: z.enum(['STARTING', 'RUNNING', 'ACTIVE', 'ERRORED', 'TERMINATED', 'PREEMPTED', 'DELETED']),
  sisRequestId: z.string().optional(),
  ncaId: z.string(),
  gpu: z.string(),
  backend: z.string(),
  location: z.string().optional(),
  instanceCreatedAt: z.string(),
  instanceUpdatedAt: z.string(),
  /**
   * Why it is not running, while it is not: its failure with its last lines of output ("exited with code 3;
   * last output: fatal: …"), or, starting, its last health check ("GET /health → 404 (expected 200), 12
   * tries, 40 s of a 600 s grace"). Secret values are redacted.
   */
  reason: z.string().optional(),
  /** How often the agent restarted it (a crash, a failed health check, a lapsed start-up grace); an extension. */
  restartCount: z.number().int().nonnegative().optional(),
}).meta({ id: 'Instance' });

/** Why a deployed version runs fewer instances than it should (placement's words; wire-reference 3 healthInfo). */
/** Why a version is not (fully) running: an instance placement could not place, or a failing one's last reason. */
export const healthInfoSchema = z.object({ gpu: z.string(), backend: z.string(), instanceType: z.string(), error: z.string() })
  .meta({ id: 'HealthInfo' });

export const functionSchema = z.object({
  id: z.string(),
  ncaId: z.string(),
  versionId: z.string(),
  name: z.string(),
  status: z.enum(functionStatuses),
  createdAt: z.string(),
  ownedByDifferentAccount: z.boolean(),
  description: z.string().optional(),
  functionType: z.enum(['DEFAULT', 'STREAMING']),
  inferenceUrl: z.string(),
  inferencePort: z.number(),
  healthUri: z.string(),
  health: healthSchema,
  containerImage: z.string().optional(),
  containerArgs: z.string().optional(),
  containerEnvironment: z.array(environmentEntry).optional(),
  models: z.array(artifact).optional(),
  resources: z.array(artifact).optional(),
  apiBodyFormat: z.enum(['PREDICT_V2', 'CUSTOM']),
  helmChart: z.string().optional(),
  helmChartServiceName: z.string().optional(),
  tags: z.array(z.string()).optional(),
  rateLimit: rateLimitSchema.optional(),
  telemetries: z.record(z.string(), z.string()).optional(),
  secrets: z.array(z.string()).optional(),
  activeInstances: z.array(instanceSchema),
  /** Only while placement cannot give the version all its instances: why (no capacity, account quota). */
  healthInfo: z.array(healthInfoSchema).optional(),
}).meta({ id: 'Function' });

/** What a version stores (function_versions.document): the record minus what changes without a write of it. */
export const functionDocumentSchema = functionSchema.omit({ status: true, activeInstances: true, healthInfo: true });

export const functionResponse = z.object({ function: functionSchema });
export const functionListResponse = z.object({ functions: z.array(functionSchema), cursor: z.string().optional() });
export const functionIdsResponse = z.object({ functionIds: z.array(z.string()) });

const visibility = z.enum(['authorized', 'private', 'public']);
export const listFunctionsQuery = z.object({
  visibility: z.preprocess(
    (value) => (Array.isArray(value) ? value : typeof value === 'string' ? value.split(',') : value),
    z.array(z.preprocess((item) => (typeof item === 'string' ? item.trim().toLowerCase() : item), visibility)),
  ).optional(),
  limit: z.coerce.number().int().min(1).max(10_000).default(1000),
  cursor: z.string().optional(),
});
export const functionIdsQuery = listFunctionsQuery.pick({ visibility: true });

export const functionParams = z.object({ functionId: z.guid('must be a function id (UUID)') });
export const versionParams = functionParams.extend({ functionVersionId: z.guid('must be a function version id (UUID)') });
export const getVersionQuery = z.object({ includeSecrets: z.enum(['true', 'false']).optional() });

export type CreateFunction = z.infer<typeof createFunctionSchema>;
export type UpdateFunction = z.infer<typeof updateFunctionSchema>;
export type FunctionRecord = z.infer<typeof functionSchema>;
export type FunctionDocument = z.infer<typeof functionDocumentSchema>;
export type FunctionStatus = (typeof functionStatuses)[number];
export type Instance = z.infer<typeof instanceSchema>;
export type HealthInfo = z.infer<typeof healthInfoSchema>;
export type Secret = z.infer<typeof secretSchema>;
export type RateLimit = z.infer<typeof rateLimitSchema>;
