// TEMPORARY, with autoscaler-main.ts: the test platform of helpers/platform.ts (startTestPlatform) started
// through autoscaler-main.ts, so autoscaler and metrics tests run against the platform as main.ts will
// compose it. Fast loops by default: scaling every 200 ms, discovery every 400 ms, a 2 s discovery lock.
import { Writable } from 'node:stream';
import { loadConfig, type ConfigInput } from '../../src/config.ts';
import { autoscalerSettingsSchema, type AutoscalerSettings } from '../../src/autoscaler/settings.ts';
import type { MetricsSettings } from '../../src/http/metrics.ts';
import { startPlatform, type Platform } from './autoscaler-main.ts';
import { createDatabase, type TestDatabase } from './databases.ts';
import { request, type RequestOptions, type TestResponse } from './http.ts';
import { createResponseValidator, type ResponseValidator } from './openapi.ts';
import { TEST_CATALOG } from './platform.ts';

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
  const database = options.database ?? await createDatabase(options.backend ?? 'sqlite');
  const logs: string[] = [];
  const logDestination = new Writable({
    write(chunk, _encoding, done) {
      logs.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  const config = loadConfig({}, merge({
    gateway: { port: 0, host: '127.0.0.1' },
    store: { dataDir: database.dataDir, databaseUrl: database.databaseUrl },
    log: { level: 'info' },
    compute: {
      agent: {
        imageCatalog: TEST_CATALOG, healthIntervalMs: 200, healthFailureThreshold: 2, restartInitialMs: 100, restartMaxMs: 400,
        stopGraceMs: 1000, udpPortRange: '48100-48199',
      },
    },
    turn: { server: 'none' },
    streaming: { waitForInstanceSeconds: 2 },
  }, options.config ?? {}));
  const platform = await startPlatform(config, {
    logDestination: logDestination as never,
    autoscalerSettings: autoscalerSettingsSchema.parse({ ...FAST_AUTOSCALER, ...options.autoscaler }),
    metricsSettings: options.metrics ?? {},
  });
  const bootstrapSecret = platform.bootstrapSecret!;
  let validators: Record<'api' | 'keys', ResponseValidator>;
  try {
    validators = {
      api: createResponseValidator((await request(platform.url, 'GET', '/v3/openapi', { host: platform.hosts.api })).body),
      keys: createResponseValidator((await request(platform.url, 'GET', '/v3/openapi', { host: platform.hosts.keys })).body),
    };
  } catch (error) {
    await platform.close();
    throw error;
  }

  async function documented(host: 'api' | 'keys', method: string, path: string, requestOptions: RequestOptions) {
    const response = await request(platform.url, method, path, { host: platform.hosts[host], ...requestOptions });
    const problems = validators[host].check(method, path, response.status, response.headers['content-type'], response.body ?? (response.text || undefined));
    if (problems.length) throw new Error(`response does not match /v3/openapi: ${problems.join('; ')}`);
    return response;
  }

  const test: ScalingTestPlatform = {
    platform,
    database,
    url: platform.url,
    logs,
    api: (method, path, requestOptions = {}) => documented('api', method, path, requestOptions),
    async metricsText(bearer) {
      const response = await documented('api', 'GET', '/metrics', bearer ? { bearer } : {});
      if (response.status !== 200) throw new Error(`/metrics: ${response.status} ${response.text}`);
      return response.text;
    },
    async token(tokenOptions = {}) {
      const response = await documented('keys', 'POST', '/v1/admin/keys', { bearer: bootstrapSecret, body: tokenOptions.scopes ? { scopes: tokenOptions.scopes } : {} });
      if (response.status !== 200) throw new Error(`token: ${response.status} ${response.text}`);
      return response.body.value;
    },
    async apiKey(token, scopes) {
      const response = await documented('keys', 'POST', '/v1/keys', {
        bearer: token,
        headers: { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'tester' },
        body: { expires_at: new Date(Date.now() + 86_400_000).toISOString(), authorizations: { policies: [{ product: 'svc-cloud-functions', scopes }] } },
      });
      if (response.status !== 200) throw new Error(`apiKey: ${response.status} ${response.text}`);
      return response.body.value;
    },
    async close() {
      await platform.close();
      if (!options.database) await database.drop();
    },
  };
  return test;
}

/** Deep merge of plain objects, later ones winning; arrays and values replace. */
function merge(...layers: Record<string, any>[]): Record<string, any> {
  const out: Record<string, any> = {};
  for (const layer of layers) {
    for (const [key, value] of Object.entries(layer)) {
      out[key] = value && typeof value === 'object' && !Array.isArray(value) && out[key] && typeof out[key] === 'object'
        ? merge(out[key], value) : value;
    }
  }
  return out;
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
