// The autoscaler's settings, one zod schema for config.ts to mount under `autoscaler` (the file, the
// environment and the defaults declared once, as compute/settings.ts does for the agent).
import { z } from 'zod';
import { autoscalingConfigurationSchema } from '../control/deployments/schema.ts';

const flag = z.preprocess((value) => (typeof value === 'string' ? value !== 'false' : value), z.boolean());
const seconds = z.coerce.number().positive();

export const autoscalerSettingsSchema = z.object({
  /** `svc serve` runs the autoscaler in its own process; turn off when `svc autoscaler` runs elsewhere. */
  enabled: flag.default(true),
  /** How often the leader decides desired instances for every discovered function version. */
  scalingIntervalMs: z.coerce.number().int().min(50).default(10_000),
  /** How often the leader looks for active function versions (and renews its lock). */
  discoveryIntervalMs: z.coerce.number().int().min(50).default(15_000),
  /** The discovery lock expires this long after its holder last renewed it (spec 8). */
  discoveryLockDurationSeconds: seconds.default(60),
  /** A version with minInstances 0 goes to zero only after no invocation for this long. */
  scaleToZeroIdleSeconds: seconds.default(300),
  /** Discovery looks this far back for invocations. */
  discoveryWindowSeconds: seconds.default(900),
  /** A discovered version not seen again for this long leaves the active set. */
  functionTtlSeconds: seconds.default(3600),
  /** Prometheus HTTP API base (…/api/v1/query_range is appended); the in-process source when absent. */
  prometheusUrl: z.string().url().optional(),
  /** Bearer token for the Prometheus API (Mimir, Thanos, VictoriaMetrics gateways); user:pass@ in the URL for basic auth. */
  prometheusToken: z.string().min(1).optional(),
  prometheusTimeoutMs: z.coerce.number().int().min(100).default(5000),
  /** The platform policy (PLATFORM_CONFIGURATION); unset fields keep the documented defaults (policy.ts). */
  platformPolicy: autoscalingConfigurationSchema.optional(),
  /** `svc autoscaler` (the role on its own): health and /metrics listener. */
  host: z.string().min(1).default('0.0.0.0'),
  port: z.coerce.number().int().min(0).max(65535).default(8082),
}).superRefine((settings, context) => {
  // The leader renews the lock on every discovery round; it must do so well before the lock expires.
  if (settings.discoveryIntervalMs * 2 > settings.discoveryLockDurationSeconds * 1000) {
    context.addIssue({ code: 'custom', path: ['discoveryLockDurationSeconds'], message: 'must be at least twice discoveryIntervalMs' });
  }
});

export type AutoscalerSettings = z.infer<typeof autoscalerSettingsSchema>;

/** Environment variables a config loader can map onto these settings (relative to the mount point). */
export const autoscalerEnvSettings: Record<string, keyof AutoscalerSettings> = {
  SVC_AUTOSCALER: 'enabled',
  SVC_AUTOSCALER_SCALING_INTERVAL_MS: 'scalingIntervalMs',
  SVC_AUTOSCALER_DISCOVERY_INTERVAL_MS: 'discoveryIntervalMs',
  SVC_AUTOSCALER_DISCOVERY_LOCK_DURATION_SECONDS: 'discoveryLockDurationSeconds',
  SVC_AUTOSCALER_SCALE_TO_ZERO_IDLE_SECONDS: 'scaleToZeroIdleSeconds',
  SVC_AUTOSCALER_HOST: 'host',
  SVC_AUTOSCALER_PORT: 'port',
  SVC_PROMETHEUS_URL: 'prometheusUrl',
  SVC_PROMETHEUS_TOKEN: 'prometheusToken',
};
