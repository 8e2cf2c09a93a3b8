// Deployment contracts (wire-reference 3): GPU specifications with their instance bounds, request
// concurrency, placement hints and autoscaling policy.
import { z } from 'zod';
import { parseDuration } from '../../duration.ts';
import { functionStatuses, healthInfoSchema, isoDurationSchema } from '../functions/schema.ts';

const ONE_HOUR_MS = 3_600_000;

const stickinessSchema = z.object({ size: isoDurationSchema, threshold: isoDurationSchema }).superRefine((window, context) => {
  const size = parseDuration(window.size);
  const threshold = parseDuration(window.threshold);
  if (size === undefined || threshold === undefined) return;
  if (size > ONE_HOUR_MS) context.addIssue({ code: 'custom', path: ['size'], message: 'must be at most PT1H' });
  if (threshold >= size) context.addIssue({ code: 'custom', path: ['threshold'], message: 'must be shorter than size' });
});

const scalingDetails = (direction: 'up' | 'down') => z.object({
  metric: z.string().max(64).optional(),
  factor: z.number().positive().refine((factor) => (direction === 'up' ? factor > 1 : factor < 1),
    direction === 'up' ? 'must be greater than 1' : 'must be less than 1'),
  threshold: z.number().int().min(0).max(100),
  stickiness: stickinessSchema.optional(),
});

export const autoscalingConfigurationSchema = z.object({
  scaleUpDetails: scalingDetails('up').optional(),
  scaleDownDetails: scalingDetails('down').optional(),
  /** STREAMING functions: ready instances kept beyond those in a session or wanted by people waiting (within min/max). */
  spare: z.number().int().min(0, 'must be 0 or more').max(1000).optional(),
});

export const autoscalingPolicies = ['CUSTOM_CONFIGURATION', 'PLATFORM_CONFIGURATION'] as const;

const bounds = {
  minInstances: z.number().int().min(0, 'must be 0 or more'),
  maxInstances: z.number().int().min(1, 'must be greater than 0'),
};

function minWithinMax(spec: { minInstances?: number; maxInstances?: number; autoscalingConfiguration?: { spare?: number } }, context: z.RefinementCtx) {
  if (spec.minInstances !== undefined && spec.maxInstances !== undefined && spec.minInstances > spec.maxInstances) {
    context.addIssue({ code: 'custom', path: ['maxInstances'], message: 'must be at least minInstances' });
  }
  const spare = spec.autoscalingConfiguration?.spare;
  if (spare !== undefined && spec.maxInstances !== undefined && spare > spec.maxInstances) {
    context.addIssue({ code: 'custom', path: ['autoscalingConfiguration', 'spare'], message: 'must be at most maxInstances' });
  }
}

export const MAX_REQUEST_CONCURRENCY = 16_384;

/** The longest start-up grace a deployment may give its instances. */
export const MAX_STARTUP_GRACE_MS = 24 * 3_600_000;

/**
 * The reference's Helm value overrides, kept as given; one key is ours: `startupGracePeriod` (ISO 8601,
 * default PT10M), how long a starting instance may take to pass its first health check before it is
 * restarted (docs/api.md, "Deployments").
 */
const configurationSchema = z.looseObject({
  startupGracePeriod: isoDurationSchema.refine((value) => {
    const ms = parseDuration(value);
    return ms === undefined || (ms >= 1000 && ms <= MAX_STARTUP_GRACE_MS);
  }, 'must be from PT1S to PT24H').optional(),
});

export const gpuSpecificationSchema = z.object({
  gpuSpecificationId: z.guid().optional(),
  gpu: z.string().min(1),
  instanceType: z.string().min(1),
  backend: z.string().min(1).optional(),
  ...bounds,
  maxRequestConcurrency: z.number().int().min(1).max(MAX_REQUEST_CONCURRENCY).default(1),
  availabilityZones: z.array(z.string()).optional(),
  clusters: z.array(z.string().min(1)).optional(),
  regions: z.array(z.string()).optional(),
  attributes: z.array(z.string()).optional(),
  preferredOrder: z.number().int().min(1).max(99).optional(),
  configuration: configurationSchema.optional(),
  autoscalingConfiguration: autoscalingConfigurationSchema.optional(),
  autoscalingConfigurationPolicy: z.enum(autoscalingPolicies).optional(),
}).superRefine(minWithinMax);

export const createDeploymentSchema = z.object({
  deploymentSpecifications: z.array(gpuSpecificationSchema).min(1, 'must hold at least one specification').max(16),
});

/** PUT (deprecated by the reference): new bounds for existing specifications, matched by id or GPU. */
export const updateDeploymentSchema = z.object({
  deploymentSpecifications: z.array(z.object({
    gpuSpecificationId: z.guid().optional(),
    gpu: z.string().min(1).optional(),
    instanceType: z.string().min(1).optional(),
    backend: z.string().optional(),
    clusters: z.array(z.string()).optional(),
    ...bounds,
    maxRequestConcurrency: z.number().int().min(1).max(MAX_REQUEST_CONCURRENCY).optional(),
  }).superRefine(minWithinMax)).min(1),
});

/** PATCH of one specification: bounds and autoscaling policy only; any other field is refused. */
export const patchGpuSpecificationSchema = z.strictObject({
  minInstances: bounds.minInstances.optional(),
  maxInstances: bounds.maxInstances.optional(),
  autoscalingConfiguration: autoscalingConfigurationSchema.optional(),
  autoscalingConfigurationPolicy: z.enum(autoscalingPolicies).optional(),
}, { error: (issue) => (issue.code === 'unrecognized_keys' ? 'only minInstances, maxInstances, autoscalingConfiguration and autoscalingConfigurationPolicy can be changed here' : undefined) })
  .superRefine(minWithinMax);

export const storedGpuSpecificationSchema = z.object({
  gpuSpecificationId: z.string(),
  gpu: z.string(),
  instanceType: z.string(),
  backend: z.string().optional(),
  minInstances: z.number().int(),
  maxInstances: z.number().int(),
  maxRequestConcurrency: z.number().int(),
  availabilityZones: z.array(z.string()).optional(),
  clusters: z.array(z.string()).optional(),
  regions: z.array(z.string()).optional(),
  attributes: z.array(z.string()).optional(),
  preferredOrder: z.number().int().optional(),
  configuration: z.record(z.string(), z.unknown()).optional(),
  autoscalingConfiguration: autoscalingConfigurationSchema.optional(),
  autoscalingConfigurationPolicy: z.enum(autoscalingPolicies).optional(),
}).meta({ id: 'GpuSpecification' });

/** Why instances of a deployment are not running (only present when some are failing). */
export const deploymentSchema = z.object({
  deploymentId: z.string(),
  functionId: z.string(),
  functionVersionId: z.string(),
  functionName: z.string(),
  ncaId: z.string(),
  functionStatus: z.enum(functionStatuses),
  deploymentSpecifications: z.array(storedGpuSpecificationSchema),
  healthInfo: z.array(healthInfoSchema).optional(),
  createdAt: z.string(),
  lastUpdatedAt: z.string(),
}).meta({ id: 'Deployment' });

export const deploymentResponse = z.object({ deployment: deploymentSchema });
export const gpuSpecificationResponse = z.object({ gpuSpecification: storedGpuSpecificationSchema });
export const deploymentIdParams = z.object({ deploymentId: z.guid('must be a deployment id (UUID)') });
export const gpuSpecParams = deploymentIdParams.extend({ gpuSpecId: z.guid('must be a GPU specification id (UUID)') });
export const deleteDeploymentQuery = z.object({ graceful: z.enum(['true', 'false']).default('false') });

export type GpuSpecification = z.infer<typeof storedGpuSpecificationSchema>;
export type CreateDeployment = z.infer<typeof createDeploymentSchema>;
export type UpdateDeployment = z.infer<typeof updateDeploymentSchema>;
export type PatchGpuSpecification = z.infer<typeof patchGpuSpecificationSchema>;
export type Deployment = z.infer<typeof deploymentSchema>;
export type { HealthInfo } from '../functions/schema.ts';
