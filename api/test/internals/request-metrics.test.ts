// RequestMetrics (http/request-metrics.ts): a counter and a histogram per label set, exposed in the
// Prometheus text format by the prom-client registry.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { RequestMetrics } from '../../src/http/request-metrics.ts';

test('counts and cumulative buckets per label set; labels are built once per series', async () => {
  const registry = new Registry();
  const metrics = new RequestMetrics(registry, { counter: { name: 'x_total', help: 'requests' }, histogram: { name: 'x_seconds', help: 'durations' } }, [0.1, 1]);
  let built = 0;
  const labels = (status: string) => () => {
    built++;
    return { route: '/a', status };
  };
  for (const seconds of [0.05, 0.1, 0.5, 5]) metrics.observe('/a 200', labels('200'), seconds);
  metrics.observe('/a 500', labels('500'), 0.2);
  assert.equal(built, 2);
  const text = await registry.metrics();
  for (const line of [
    '# TYPE x_total counter', 'x_total{route="/a",status="200"} 4', 'x_total{route="/a",status="500"} 1',
    '# TYPE x_seconds histogram', 'x_seconds_bucket{route="/a",status="200",le="0.1"} 2', 'x_seconds_bucket{route="/a",status="200",le="1"} 3',
    'x_seconds_bucket{route="/a",status="200",le="+Inf"} 4', 'x_seconds_sum{route="/a",status="200"} 5.65', 'x_seconds_count{route="/a",status="200"} 4',
    'x_seconds_bucket{route="/a",status="500",le="0.1"} 0', 'x_seconds_bucket{route="/a",status="500",le="1"} 1',
  ]) assert.ok(text.includes(`${line}\n`), `${line} in\n${text}`);
});
