// A rate string of a function's rateLimit (wire-reference 2: `N-[SMHD](,N-[SMHD])*`): each part is a
// limit per period. The schema (control/functions/schema.ts) has checked the pattern already.

const PERIOD_MS = { S: 1000, M: 60_000, H: 3_600_000, D: 86_400_000 } as const;

export interface Rate {
  /** As written, upper-cased (`5-S`): names the rate in keys and messages. */
  text: string;
  limit: number;
  periodMs: number;
}

/** The longest period a rate may have: what a counter outlives at most. */
export const LONGEST_PERIOD_MS = PERIOD_MS.D;

export function parseRates(value: string): Rate[] {
  return value.split(',').map((part) => {
    const text = part.trim().toUpperCase();
    const [count, unit] = text.split('-');
    return { text, limit: Number(count), periodMs: PERIOD_MS[unit as keyof typeof PERIOD_MS] };
  });
}
