// The session broker's settings, one zod schema for config.ts to mount under `streaming`. The answer
// bound is designed with the intermediaries' timeouts: every sign-in and every WebSocket upgrade is
// answered within `answerWithinSeconds`, well inside the reference HAProxy's and proxy/'s 7 s
// `timeout server`, so a busy function is a place in line for the browser, never a 504.
import { z } from 'zod';

export const streamingSettingsSchema = z.object({
  /** How long a dropped session waits for its browser to reconnect (spec: at most 300 s). */
  resumeWindowSeconds: z.coerce.number().int().min(1).max(300).default(60),
  /**
   * The resume window while someone waits in line for the same function: a browser that quit without
   * saying goodbye (no pagehide) then holds the instance this long, not the full window.
   */
  busyResumeWindowSeconds: z.coerce.number().int().min(1).max(300).default(10),
  /** The longest a sign-in or an upgrade is held waiting for an instance before it is answered with its place in line. */
  answerWithinSeconds: z.coerce.number().min(0.1).max(6, 'must stay below the intermediaries\' 7 s response timeout').default(3),
  /** The longest anyone waits in line; then the wait ends with 503. */
  maxWaitSeconds: z.coerce.number().int().min(1).max(86_400).default(900),
  /** People waiting per function; one more is a 503. */
  maxLineLength: z.coerce.number().int().min(1).max(10_000).default(100),
  /** A granted instance waits this long for its WebSocket, then goes to the next in line. */
  grantSeconds: z.coerce.number().min(0.5).max(120).default(10),
});

export type StreamingSettings = z.infer<typeof streamingSettingsSchema>;

/** Environment variables a config loader can map onto these settings (relative to the mount point). */
export const streamingEnvSettings: Record<string, keyof StreamingSettings> = {
  SVC_STREAMING_RESUME_WINDOW_SECONDS: 'resumeWindowSeconds',
  SVC_STREAMING_BUSY_RESUME_WINDOW_SECONDS: 'busyResumeWindowSeconds',
  SVC_STREAMING_ANSWER_WITHIN_SECONDS: 'answerWithinSeconds',
  SVC_STREAMING_MAX_WAIT_SECONDS: 'maxWaitSeconds',
  SVC_STREAMING_MAX_LINE_LENGTH: 'maxLineLength',
  SVC_STREAMING_GRANT_SECONDS: 'grantSeconds',
};
