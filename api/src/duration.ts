// ISO 8601 durations as the reference writes them ("PT10S", "PT1H", "P3D"): parsed to milliseconds.

const ISO_DURATION = /^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$/;

/** Milliseconds, or undefined when `value` is not an ISO 8601 duration of days/hours/minutes/seconds. */
export function parseDuration(value: string): number | undefined {
  const match = ISO_DURATION.exec(value);
  if (!match || value === 'P' || value.endsWith('T')) return undefined;
  const [, days, hours, minutes, seconds] = match;
  return ((Number(days ?? 0) * 24 + Number(hours ?? 0)) * 60 + Number(minutes ?? 0)) * 60_000 + Number(seconds ?? 0) * 1000;
}
