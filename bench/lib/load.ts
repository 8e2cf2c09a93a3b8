// A closed-loop load generator: `concurrency` clients, each sending its next request when the previous
// answers, for `seconds`. Latencies are measured per request with performance.now(), so sub-millisecond
// differences show.
import { Pool } from 'undici';
import { percentile } from './report.ts';

export interface LoadTarget {
  /** One origin, or several taken in turn request by request (a round-robin client in front of replicas). */
  origin: string | string[];
  path: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string;
}

export interface LoadResult {
  requestsPerSecond: number;
  p50: number;
  p99: number;
  errors: number;
}

export async function load(target: LoadTarget, concurrency: number, seconds: number): Promise<LoadResult> {
  const origins = Array.isArray(target.origin) ? target.origin : [target.origin];
  const pools = origins.map((origin) => new Pool(origin, { connections: concurrency, pipelining: 1 }));
  let turn = 0;
  const latencies: number[] = [];
  let errors = 0;
  const until = performance.now() + seconds * 1000;
  const client = async () => {
    while (performance.now() < until) {
      const started = performance.now();
      try {
        const pool = pools[turn++ % pools.length];
        const response = await pool.request({ path: target.path, method: target.method ?? 'POST', headers: target.headers, body: target.body });
        await response.body.dump();
        if (response.statusCode !== 200) errors++;
        else latencies.push(performance.now() - started);
      } catch {
        errors++;
      }
    }
  };
  const began = performance.now();
  await Promise.all(Array.from({ length: concurrency }, client));
  const elapsed = (performance.now() - began) / 1000;
  await Promise.all(pools.map((pool) => pool.close()));
  latencies.sort((a, b) => a - b);
  return { requestsPerSecond: latencies.length / elapsed, p50: percentile(latencies, 50), p99: percentile(latencies, 99), errors };
}
