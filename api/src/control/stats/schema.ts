// The owners' numbers over HTTP (docs/api.md "Numbers for owners"): the query and the answer, one schema
// each; the CLI decodes the answer with the same schema.
import { z } from 'zod';
import { parseDuration } from '../../duration.ts';

const isInstant = (value: string) => /^\d{4}-\d{2}-\d{2}T/.test(value) && !Number.isNaN(Date.parse(value));

export const statsQuery = z.object({
  since: z.string()
    .refine((value) => (parseDuration(value) ?? 0) > 0 || isInstant(value), 'must be an ISO 8601 duration back from now (PT6H) or a UTC time (2026-01-31T12:00:00Z)')
    .optional(),
  step: z.string().refine((value) => (parseDuration(value) ?? 0) > 0, 'must be an ISO 8601 duration such as PT5M').optional(),
});

export type StatsQuery = z.infer<typeof statsQuery>;

const meanMax = z.object({ mean: z.number(), max: z.number() });

const numbers = {
  /** Invocations answered (a request answered 202 counts once, at its 202). */
  requests: z.number().int(),
  requestsPerSecond: z.number(),
  /** 4xx answers, 429s of the rate limit and of a full queue included. */
  clientErrors: z.number().int(),
  /** 429 answers alone. */
  rateLimited: z.number().int(),
  /** 5xx answers: the function's own, and the platform's (502 when an instance ended mid-request). */
  serverErrors: z.number().int(),
  /** Until answered, in ms; null without requests. */
  latencyMs: z.object({ p50: z.number(), p99: z.number(), mean: z.number() }).nullable(),
  /** Requests waiting for a slot, sampled every second. */
  queueDepth: meanMax,
  /** Requests an instance worked on (sessions, for STREAMING functions), sampled every second. */
  inflight: meanMax,
};

export const statsPointSchema = z.object({ at: z.string(), ...numbers }).meta({ id: 'StatsPoint' });

export const versionStatsSchema = z.object({
  functionId: z.string(),
  functionVersionId: z.string(),
  /** The window: [since, until), `until` now; points every `stepSeconds` from `since`. */
  since: z.string(),
  until: z.string(),
  stepSeconds: z.number().int(),
  /** Resolution of the rows: the interval in progress is not counted yet. */
  intervalSeconds: z.number().int(),
  totals: z.object(numbers),
  points: z.array(statsPointSchema),
}).meta({ id: 'VersionStats' });

export const versionStatsResponse = z.object({ stats: versionStatsSchema });
export const functionStatsResponse = z.object({ stats: z.array(versionStatsSchema) });

export type VersionStats = z.infer<typeof versionStatsSchema>;
export type StatsPoint = z.infer<typeof statsPointSchema>;
