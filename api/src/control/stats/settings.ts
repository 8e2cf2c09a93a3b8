// Settings of the owners' numbers (docs/api.md "Numbers for owners"), mounted by config.ts under `stats`.
import { z } from 'zod';

export const statsSettingsSchema = z.object({
  /** Each replica writes one row per active version per interval: the resolution of what the API answers. */
  intervalSeconds: z.coerce.number().int().min(1).max(3600).default(60),
  /** Rows older than this are deleted; `since` cannot reach further back. */
  retentionHours: z.coerce.number().int().min(1).max(24 * 90).default(168),
});

export type StatsSettings = z.infer<typeof statsSettingsSchema>;

export const statsEnvSettings: Record<string, keyof StatsSettings> = {
  SVC_STATS_INTERVAL_SECONDS: 'intervalSeconds',
  SVC_STATS_RETENTION_HOURS: 'retentionHours',
};
