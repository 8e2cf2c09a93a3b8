// The telemetry export's settings, one zod schema for config.ts to mount under `telemetry`.
import { z } from 'zod';

const flag = z.preprocess((value) => (typeof value === 'string' ? value !== 'false' : value), z.boolean());

export const telemetrySettingsSchema = z.object({
  /** Export to the telemetries functions name; false keeps the API but exports nothing. */
  enabled: flag.default(true),
  /** Tenants' endpoints may name loopback, private and link-local addresses (a test rig, a private collector). */
  allowInternalEndpoints: flag.default(false),
  /** How often queued spans and log lines are handed to their exporters, in one batch per telemetry. */
  flushMs: z.coerce.number().int().min(10).max(60_000).default(1000),
  /** How often a version's metrics are pushed (OTLP and remote-write alike). */
  metricsIntervalMs: z.coerce.number().int().min(100).max(600_000).default(15_000),
  /** Records waiting for a flush, and spans or log lines waiting per telemetry; beyond them, dropped and counted. */
  maxQueue: z.coerce.number().int().min(16).max(1_000_000).default(8192),
  /** An endpoint whose export failed is probed this often (an empty export request); until a 2xx, what would go there is dropped and counted. */
  retryAfterMs: z.coerce.number().int().min(100).max(3_600_000).default(10_000),
  /** One export request's timeout. */
  timeoutMs: z.coerce.number().int().min(100).max(120_000).default(5000),
  /** How long a version's telemetries are remembered before they are read again (a deleted one stops at once here). */
  refreshMs: z.coerce.number().int().min(100).max(3_600_000).default(30_000),
});

export type TelemetrySettings = z.infer<typeof telemetrySettingsSchema>;

/** Environment variables a config loader can map onto these settings (relative to the mount point). */
export const telemetryEnvSettings: Record<string, keyof TelemetrySettings> = {
  SVC_TELEMETRY_ENABLED: 'enabled',
  SVC_TELEMETRY_ALLOW_INTERNAL_ENDPOINTS: 'allowInternalEndpoints',
  SVC_TELEMETRY_FLUSH_MS: 'flushMs',
  SVC_TELEMETRY_METRICS_INTERVAL_MS: 'metricsIntervalMs',
};
