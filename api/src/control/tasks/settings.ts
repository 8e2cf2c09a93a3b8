// The task plane's settings, one zod schema for config.ts to mount under `tasks` (the file, the
// environment and the defaults declared once, as compute/settings.ts does for the agent).
import { z } from 'zod';

export const tasksSettingsSchema = z.object({
  /** Results store of UPLOAD tasks (local directory); default <store.dataDir>/task-results. */
  resultsDir: z.string().optional(),
  /** Largest single result file an agent may upload. */
  maxResultBytes: z.coerce.number().int().min(1).default(1024 * 1024 * 1024),
  /** A node whose agent stays away this long has its launched and running tasks ERRORED (its lease lapses sooner). */
  agentLostAfterSeconds: z.coerce.number().int().min(1).default(300),
  /** How often the queue is looked at when nothing prompts it (queued-duration expiry, reconnects). */
  schedulerIntervalMs: z.coerce.number().int().min(50).default(1000),
});

export type TasksSettings = z.infer<typeof tasksSettingsSchema>;

/** Environment variables a config loader can map onto these settings (relative to the mount point). */
export const tasksEnvSettings: Record<string, keyof TasksSettings> = {
  SVC_TASK_RESULTS_DIR: 'resultsDir',
  SVC_TASK_MAX_RESULT_BYTES: 'maxResultBytes',
  SVC_TASK_AGENT_LOST_AFTER_SECONDS: 'agentLostAfterSeconds',
};
