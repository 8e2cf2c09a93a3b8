// Telemetry contracts (the reference's /v2/svc/telemetries): where a function's or task's logs, metrics
// and traces are exported, and the sealed secret the platform authenticates with there.
import { z } from 'zod';

export const telemetryTypes = ['LOGS', 'METRICS', 'TRACES'] as const;
export const telemetryProviders = [
  'PROMETHEUS', 'GRAFANA_CLOUD', 'DATADOG', 'SPLUNK', 'SERVICENOW', 'AZURE_MONITOR', 'KRATOS', 'KRATOS_THANOS',
] as const;
export const telemetryProtocols = ['HTTP', 'GRPC'] as const;

const upper = (value: unknown) => typeof value === 'string' ? value.toUpperCase() : value;

/**
 * How the platform authenticates at the endpoint: a string is sent as `Authorization: Bearer <value>`;
 * {username, password} (or Grafana Cloud's {instanceId, apiKey}) as Basic; {headers} as those headers.
 */
export const telemetrySecretValueSchema = z.union([
  z.string().min(1).max(32_768),
  z.object({ username: z.string().min(1), password: z.string().min(1) }).strict(),
  z.object({ instanceId: z.union([z.string().min(1), z.number().int()]), apiKey: z.string().min(1) }).strict(),
  z.object({ headers: z.record(z.string().regex(/^[A-Za-z0-9-]{1,128}$/, 'must be an HTTP header name'), z.string().max(8192)) }).strict(),
], { error: 'must be a token (string), {username, password}, {instanceId, apiKey} or {headers: {name: value}}' });

export const createTelemetrySchema = z.object({
  name: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/, 'must be 1-128 letters, digits, _, . or -, starting with a letter or digit'),
  endpoint: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).max(2048),
  protocol: z.preprocess(upper, z.enum(telemetryProtocols)).default('HTTP'),
  provider: z.preprocess(upper, z.enum(telemetryProviders)),
  types: z.array(z.preprocess(upper, z.enum(telemetryTypes))).min(1),
  secret: z.object({
    name: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,47}$/, 'must be 1-48 letters, digits, _, . or -'),
    value: telemetrySecretValueSchema,
  }),
});

export const telemetrySchema = z.object({
  telemetryId: z.string(),
  name: z.string(),
  endpoint: z.string(),
  protocol: z.enum(telemetryProtocols),
  provider: z.enum(telemetryProviders),
  types: z.array(z.enum(telemetryTypes)),
  /** The secret's name only; its value is never returned. */
  secret: z.object({ name: z.string() }),
  createdAt: z.string(),
}).meta({ id: 'Telemetry' });

/** A function's or task's `telemetries`: which telemetry gets each signal. */
export const telemetryReferencesSchema = z.object({
  logsTelemetryId: z.guid().optional(),
  metricsTelemetryId: z.guid().optional(),
  tracesTelemetryId: z.guid().optional(),
});

export const telemetryParams = z.object({ telemetryId: z.guid('must be a telemetry id (UUID)') });
export const telemetryResponse = z.object({ telemetry: telemetrySchema });
export const telemetryListResponse = z.object({ telemetries: z.array(telemetrySchema) });

export type CreateTelemetry = z.infer<typeof createTelemetrySchema>;
export type Telemetry = z.infer<typeof telemetrySchema>;
export type TelemetryType = (typeof telemetryTypes)[number];
export type TelemetrySecretValue = z.infer<typeof telemetrySecretValueSchema>;
export type TelemetryReferences = z.infer<typeof telemetryReferencesSchema>;
