// A real Prometheus (Debian `prometheus`) for tests, with its remote-write receiver on: started in a
// temporary directory on a free loopback port, stopped and removed by close().
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort, until } from './wait.ts';

export const PROMETHEUS = '/usr/bin/prometheus';

/** Whether /usr/bin/prometheus is there: required in CI, skipped with one printed line elsewhere. */
export function prometheusPresent(what: string): boolean {
  if (existsSync(PROMETHEUS)) return true;
  if (process.env.CI) throw new Error(`${PROMETHEUS} is required in CI (Debian package prometheus)`);
  console.log(`# skipping ${what}: install Prometheus (Debian: prometheus)`);
  return false;
}

export interface TestPrometheus {
  url: string;
  /** Where remote-write goes. */
  writeUrl: string;
  /** An instant query's result vector. */
  query(expression: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]>;
  close(): Promise<void>;
}

export async function startPrometheus(): Promise<TestPrometheus> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'svc-prometheus-'));
  writeFileSync(path.join(dir, 'prometheus.yml'), 'global: { scrape_interval: 15s }\n');
  const port = await freePort();
  const child: ChildProcess = spawn(PROMETHEUS, [
    `--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'data')}`,
    `--web.listen-address=127.0.0.1:${port}`, '--web.enable-remote-write-receiver', '--log.level=warn',
  ], { stdio: ['ignore', 'ignore', 'inherit'] });
  const url = `http://127.0.0.1:${port}`;
  const close = async () => {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await until('Prometheus to be ready', async () => (await fetch(`${url}/-/ready`).catch(() => undefined))?.status === 200, 30_000);
  } catch (error) {
    await close();
    throw error;
  }
  return {
    url,
    writeUrl: `${url}/api/v1/write`,
    async query(expression) {
      const response = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expression)}`);
      const body = await response.json() as { status: string; data: { result: { metric: Record<string, string>; value: [number, string] }[] } };
      return body.status === 'success' ? body.data.result : [];
    },
    close,
  };
}
