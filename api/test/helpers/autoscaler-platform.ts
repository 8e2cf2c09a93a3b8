// The test platform of helpers/platform.ts with the autoscaler's fast loops (scaling every 200 ms, discovery
// every 400 ms, a 2 s discovery lock) and a /metrics reader, for the autoscaler and metrics tests.
import type { ConfigInput } from '../../src/config.ts';
import type { AutoscalerSettings } from '../../src/autoscaler/settings.ts';
import type { MetricsSettings } from '../../src/http/metrics.ts';
import type { Platform } from '../../src/main.ts';
import type { TestDatabase } from './databases.ts';
import type { RequestOptions, TestResponse } from './http.ts';
import { merge, startTestPlatform } from './platform.ts';

export const FAST_AUTOSCALER: Partial<AutoscalerSettings> = {
  scalingIntervalMs: 200, discoveryIntervalMs: 400, discoveryLockDurationSeconds: 2, scaleToZeroIdleSeconds: 300,
};

export interface ScalingTestPlatform {
  platform: Platform;
  database: TestDatabase;
  url: string;
  logs: string[];
  api(method: string, path: string, options?: RequestOptions): Promise<TestResponse>;
  /** GET /metrics as text (no credential unless given). */
  metricsText(bearer?: string): Promise<string>;
  token(options?: { scopes?: string[] }): Promise<string>;
  apiKey(token: string, scopes: string[]): Promise<string>;
  close(): Promise<void>;
}

export interface ScalingTestPlatformOptions {
  backend?: 'sqlite' | 'postgres';
  database?: TestDatabase;
  config?: ConfigInput;
  autoscaler?: Partial<AutoscalerSettings>;
  metrics?: MetricsSettings;
}

export async function startScalingTestPlatform(options: ScalingTestPlatformOptions = {}): Promise<ScalingTestPlatform> {
  const svc = await startTestPlatform({
    backend: options.backend, database: options.database,
    config: merge(options.config ?? {}, { autoscaler: { ...FAST_AUTOSCALER, ...options.autoscaler }, metrics: options.metrics ?? {} }),
  });
  return {
    get platform() { return svc.platform; },
    database: svc.database,
    url: svc.url,
    logs: svc.logs,
    api: svc.api,
    async metricsText(bearer) {
      const response = await svc.api('GET', '/metrics', bearer ? { bearer } : {});
      if (response.status !== 200) throw new Error(`/metrics: ${response.status} ${response.text}`);
      return response.text;
    },
    token: (tokenOptions) => svc.token(tokenOptions),
    apiKey: (token, scopes) => svc.apiKey(token, scopes),
    close: () => svc.close(),
  };
}

/** The value of one sample line of a /metrics text, e.g. metric('svc_x_total', { status: 'ok' }); 0 when absent. */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const wanted = Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`));
    if (wanted) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}
