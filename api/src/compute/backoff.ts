// Exponential back-off shared by the reconciler (restarts) and the agent link (reconnects).

export interface BackoffSettings {
  initialMs: number;
  maxMs: number;
}

/** Delay before retry number `attempt` (0 = the first retry): initial, doubling, capped at max. */
export function backoffDelay(settings: BackoffSettings, attempt: number): number {
  return Math.min(settings.maxMs, settings.initialMs * 2 ** Math.min(attempt, 30));
}
