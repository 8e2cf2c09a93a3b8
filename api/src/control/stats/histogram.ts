// Latency histograms that merge: fixed buckets growing by a factor of 1.25 from 1 ms, so rows of any
// replica and any interval add up bucket by bucket, and a percentile read from the sum is within one
// bucket (±12 %) of the true one. A row keeps only the buckets it counted ({index: count}).
import { z } from 'zod';

const FIRST_MS = 1;
const FACTOR = 1.25;
/** 1 ms × 1.25^72 ≈ 9 h: the last bucket takes everything longer. */
export const BUCKETS = 73;
const LOG_FACTOR = Math.log(FACTOR);

export const histogramSchema = z.record(z.string().regex(/^\d+$/), z.number().int().nonnegative());
export type Histogram = Record<string, number>;

/** The bucket of a latency: bucket i holds (upper(i - 1), upper(i)]. */
export function bucketOf(ms: number): number {
  if (ms <= FIRST_MS) return 0;
  return Math.min(BUCKETS - 1, Math.ceil(Math.log(ms / FIRST_MS) / LOG_FACTOR - 1e-9));
}

const upper = (index: number) => FIRST_MS * FACTOR ** index;

export function addInto(target: Histogram, source: Histogram) {
  for (const [index, count] of Object.entries(source)) target[index] = (target[index] ?? 0) + count;
}

/** The q-quantile (0 < q < 1) in ms, interpolated inside its bucket; undefined for an empty histogram. */
export function quantile(histogram: Histogram, q: number): number | undefined {
  const entries = Object.entries(histogram).map(([index, count]) => [Number(index), count] as const).sort((a, b) => a[0] - b[0]);
  const total = entries.reduce((sum, [, count]) => sum + count, 0);
  if (total === 0) return undefined;
  const rank = q * total;
  let seen = 0;
  for (const [index, count] of entries) {
    if (seen + count >= rank) {
      const low = index === 0 ? 0 : upper(index - 1);
      return low + (upper(index) - low) * ((rank - seen) / count);
    }
    seen += count;
  }
  return upper(entries.at(-1)![0]);
}
