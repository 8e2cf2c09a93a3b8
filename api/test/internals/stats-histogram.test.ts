// The owners' latency histograms (control/stats/histogram.ts): percentiles read from merged rows are
// within one bucket of the true ones, and merging adds bucket by bucket.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { addInto, BUCKETS, bucketOf, quantile, type Histogram } from '../../src/control/stats/histogram.ts';

function histogramOf(latencies: number[]): Histogram {
  const histogram: Histogram = {};
  for (const ms of latencies) histogram[bucketOf(ms)] = (histogram[bucketOf(ms)] ?? 0) + 1;
  return histogram;
}

test('p50 and p99 of a spread of latencies are within 12 % of the true ones', () => {
  // 1 ms to 10 s, log-uniform: every bucket sees some.
  const latencies = Array.from({ length: 10_000 }, (_, i) => 10 ** (4 * (i / 9_999)));
  const sorted = [...latencies].sort((a, b) => a - b);
  const histogram = histogramOf(latencies);
  for (const q of [0.5, 0.9, 0.99]) {
    const exact = sorted[Math.ceil(q * sorted.length) - 1];
    const read = quantile(histogram, q)!;
    assert.ok(Math.abs(read - exact) / exact <= 0.125, `q${q}: ${read} vs ${exact}`);
  }
});

test('rows of two replicas merge bucket by bucket; empty is undefined; extremes land in the end buckets', () => {
  const merged: Histogram = {};
  addInto(merged, histogramOf([5, 5, 5]));
  addInto(merged, histogramOf([5, 400]));
  assert.equal(merged[bucketOf(5)], 4);
  assert.equal(merged[bucketOf(400)], 1);
  assert.ok(Math.abs(quantile(merged, 0.5)! - 5) / 5 <= 0.25);
  assert.ok(quantile(merged, 0.99)! > 300);
  assert.equal(quantile({}, 0.5), undefined);
  assert.equal(bucketOf(0), 0);
  assert.equal(bucketOf(1), 0);
  assert.equal(bucketOf(1e12), BUCKETS - 1);
});
