// Starts the real platform on port 0 for a test: real store, real gateway, real sockets. Logs are
// captured so tests can assert what was (and was not) written.
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { loadConfig, type ConfigInput } from '../../src/config.ts';
import { ADMIN_ISSUER, loadAdminKey, signJwt } from '../../src/control/keys/signing.ts';
import { startPlatform, type Platform } from '../../src/main.ts';
import { createDatabase, type TestDatabase } from './databases.ts';
import { request, type RequestOptions, type TestResponse } from './http.ts';
import { createResponseValidator, type ResponseValidator } from './openapi.ts';

export const TEST_CATALOG = fileURLToPath(new URL('../fixtures/images.yaml', import.meta.url));

export const MANAGEMENT_SCOPES = [
  'register_function', 'list_functions', 'list_functions_details', 'deploy_function', 'update_function',
  'update_secrets', 'delete_function', 'manage_telemetries', 'manage_registry_credentials', 'cluster-management',
];

export interface TestPlatform {
  platform: Platform;
  database: TestDatabase;
  url: string;
  /** The bootstrap secret the first start printed: it works once (token() does not use it). */
  bootstrapSecret: string;
  logs: string[];
  /** Moves the platform's clock. */
  advance(ms: number): void;
  api(method: string, path: string, options?: RequestOptions): Promise<TestResponse>;
  keys(method: string, path: string, options?: RequestOptions): Promise<TestResponse>;
  /** A management token (SVC_TOKEN) for `ncaId` (default account unless given), minted with an admin token. */
  token(options?: { ncaId?: string; scopes?: string[] }): Promise<string>;
  /** An account-administration JWT signed with the installation's admin key. */
  adminToken(options?: { expiresInSeconds?: number }): Promise<string>;
  /** An opaque key minted with `token`; task keys with task: true. */
  apiKey(token: string, scopes: string[], options?: { task?: boolean; expiresAt?: string }): Promise<string>;
  restart(overrides?: ConfigInput): Promise<void>;
  close(): Promise<void>;
}

export interface TestPlatformOptions {
  backend?: 'sqlite' | 'postgres';
  config?: ConfigInput;
  database?: TestDatabase;
  /** CA to trust when the platform serves TLS. */
  ca?: string;
}

export async function startTestPlatform(options: TestPlatformOptions = {}): Promise<TestPlatform> {
  const database = options.database ?? await createDatabase(options.backend ?? 'sqlite');
  const logs: string[] = [];
  const logDestination = new Writable({
    write(chunk, _encoding, done) {
      logs.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  let offset = 0;
  const now = () => new Date(Date.now() + offset);
  const configFor = (overrides: ConfigInput = {}) => loadConfig({}, merge({
    gateway: { port: 0, host: '127.0.0.1' },
    store: { dataDir: database.dataDir, databaseUrl: database.databaseUrl },
    log: { level: 'info' },
    // Quick restarts and checks so tests of the execution plane take seconds, not minutes.
    compute: {
      agent: {
        imageCatalog: TEST_CATALOG, healthIntervalMs: 200, healthFailureThreshold: 2, restartInitialMs: 100, restartMaxMs: 400,
        stopGraceMs: 1000, udpPortRange: '48100-48199',
        // The test functions report through files of the test's own (counter.ts): a sandbox would hide them.
        // The sandbox has tests of its own (compute/sandbox.test.ts, tenant-isolation.test.ts).
        sandbox: 'off',
      },
    },
    // Tests that need STUN/TURN start their own on free ports.
    turn: { server: 'none' },
    streaming: { answerWithinSeconds: 1 },
    // A test machine under load stalls now and then; only guard.test.ts wants readiness to notice.
    guard: { blockedMs: 10_000 },
  }, options.config ?? {}, overrides));
  let platform = await startPlatform(configFor(), { logDestination: logDestination as never, now });
  const bootstrapSecret = platform.bootstrapSecret!;
  const ca = options.ca;
  let validators: Record<'api' | 'keys', ResponseValidator>;
  try {
    validators = {
      api: createResponseValidator((await request(platform.url, 'GET', '/v3/openapi', { host: platform.hosts.api, ca })).body),
      keys: createResponseValidator((await request(platform.url, 'GET', '/v3/openapi', { host: platform.hosts.keys, ca })).body),
    };
  } catch (error) {
    await platform.close();
    throw error;
  }

  /** Every response a test receives must match the documented schema for its status. */
  async function documented(host: 'api' | 'keys', method: string, path: string, requestOptions: RequestOptions) {
    const response = await request(platform.url, method, path, { host: platform.hosts[host], ca, ...requestOptions });
    const problems = validators[host].check(method, path, response.status, response.headers['content-type'], response.body ?? (response.text || undefined));
    if (problems.length) throw new Error(`response does not match /v3/openapi: ${problems.join('; ')}`);
    return response;
  }

  const test: TestPlatform = {
    get platform() { return platform; },
    database,
    get url() { return platform.url; },
    bootstrapSecret,
    logs,
    advance(ms) { offset += ms; },
    api: (method, path, requestOptions = {}) => documented('api', method, path, requestOptions),
    keys: (method, path, requestOptions = {}) => documented('keys', method, path, requestOptions),
    async token(tokenOptions = {}) {
      const response = await test.keys('POST', '/v1/admin/keys', {
        bearer: await test.adminToken(),
        body: { ...(tokenOptions.ncaId ? { ncaId: tokenOptions.ncaId } : {}), ...(tokenOptions.scopes ? { scopes: tokenOptions.scopes } : {}) },
      });
      if (response.status !== 200) throw new Error(`token: ${response.status} ${response.text}`);
      return response.body.value;
    },
    async adminToken(adminOptions = {}) {
      const key = await loadAdminKey(platform.adminSigningKeyFile, { create: false });
      const expiresAt = new Date(now().getTime() + (adminOptions.expiresInSeconds ?? 3600) * 1000);
      return signJwt(key, { iss: ADMIN_ISSUER, aud: 'svc-api', sub: 'tester' }, expiresAt);
    },
    async apiKey(token, scopes, keyOptions = {}) {
      const response = await test.keys('POST', '/v1/keys', {
        bearer: token,
        headers: { 'key-issuer-service': keyOptions.task ? 'svct-api' : 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'tester' },
        body: {
          expires_at: keyOptions.expiresAt ?? new Date(now().getTime() + 86_400_000).toISOString(),
          authorizations: { policies: [{ product: keyOptions.task ? 'svc-cloud-tasks' : 'svc-cloud-functions', scopes }] },
        },
      });
      if (response.status !== 200) throw new Error(`apiKey: ${response.status} ${response.text}`);
      return response.body.value;
    },
    async restart(overrides) {
      await platform.close();
      platform = await startPlatform(configFor(overrides), { logDestination: logDestination as never, now });
    },
    async close() {
      await platform.close();
      if (!options.database) await database.drop();
    },
  };
  return test;
}

/** Deep merge of plain objects, later ones winning; arrays and values replace. */
export function merge(...layers: Record<string, any>[]): Record<string, any> {
  const out: Record<string, any> = {};
  for (const layer of layers) {
    for (const [key, value] of Object.entries(layer)) {
      out[key] = value && typeof value === 'object' && !Array.isArray(value) && out[key] && typeof out[key] === 'object'
        ? merge(out[key], value) : value;
    }
  }
  return out;
}
