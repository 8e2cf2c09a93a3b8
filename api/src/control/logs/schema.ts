// The logs endpoints' contract (docs/api.md, "Logs"): which lines, and how they come back.
import { z } from 'zod';
import { logLineSchema } from '../../compute/protocol.ts';

export const MAX_TAIL = 10_000;

const RELATIVE = /^(\d+)(s|m|h|d)$/;
const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** `since` as an instant: "10m" (s, m, h, d) back from `now`, or an ISO 8601 instant; undefined when it is neither. */
export function sinceInstant(value: string, now: Date): string | undefined {
  const relative = RELATIVE.exec(value);
  if (relative) return new Date(now.getTime() - Number(relative[1]) * UNIT_MS[relative[2] as keyof typeof UNIT_MS]).toISOString();
  if (!/^\d{4}-\d{2}-\d{2}T/.test(value)) return undefined;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : new Date(at).toISOString();
}

export const logsQuery = z.object({
  instanceId: z.string().min(1).max(200).optional(),
  since: z.string().refine((value) => sinceInstant(value, new Date()) !== undefined, 'must be a duration back from now (30s, 10m, 2h, 1d) or an ISO 8601 instant').optional(),
  tail: z.coerce.number().int().min(1).max(MAX_TAIL).optional(),
  follow: z.enum(['true', 'false']).optional(),
});
export type LogsQueryInput = z.infer<typeof logsQuery>;

export const logLine = logLineSchema.meta({ id: 'LogLine' });
export const logsResponse = z.object({ logs: z.array(logLine) });
