// TEMPORARY, until the lead wires the task plane into api/src/main.ts (see the integration patch in the
// tasks report): a faithful copy of startPlatform (api/src/main.ts at the commit this was written against)
// with exactly the lines that patch adds, marked "+tasks". It opens the store as main.ts does, then runs
// the tasks migration with its own migration table (the real registration is '0004_tasks' in
// store/migrations.ts; the migration is idempotent, so either order works). Tests and the bench start the
// platform through here; once main.ts carries the patch, they switch to api/test/helpers/platform.ts and
// this file goes.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { DestinationStream } from 'pino';
import type { Config } from '../../src/config.ts';
import { accountRoutes } from '../../src/control/accounts/routes.ts';
import { createAccountsRepo } from '../../src/control/accounts/repo.ts';
import { createAccountsService } from '../../src/control/accounts/service.ts';
import { healthRoutes } from '../../src/control/health/routes.ts';
import { createHealthService } from '../../src/control/health/service.ts';
import { createSettingsRepo } from '../../src/control/installation/repo.ts';
import { ensureBootstrapSecret, ensureLocalCluster, loadSecretBox } from '../../src/control/installation/service.ts';
import { createClustersRepo } from '../../src/control/clusters/repo.ts';
import { clusterRoutes } from '../../src/control/clusters/routes.ts';
import { createClustersService } from '../../src/control/clusters/service.ts';
import { createDeploymentsRepo } from '../../src/control/deployments/repo.ts';
import { deploymentRoutes } from '../../src/control/deployments/routes.ts';
import { createDeploymentsService } from '../../src/control/deployments/service.ts';
import { createFunctionsRepo } from '../../src/control/functions/repo.ts';
import { functionRoutes } from '../../src/control/functions/routes.ts';
import { createFunctionsService } from '../../src/control/functions/service.ts';
import { createRegistryRepo } from '../../src/control/registry/repo.ts';
import { registryRoutes } from '../../src/control/registry/routes.ts';
import { createRegistryService } from '../../src/control/registry/service.ts';
import { deploySamples, type DeployedSample } from '../../src/control/samples.ts';
import { createKeysRepo } from '../../src/control/keys/repo.ts';
import { keyRoutes, whoamiRoute } from '../../src/control/keys/routes.ts';
import { createKeyService } from '../../src/control/keys/service.ts';
import { ADMIN_ISSUER, loadAdminKey, loadTokenKey, signJwt } from '../../src/control/keys/signing.ts';
import { createCredentialVerifier } from '../../src/control/keys/verifier.ts';
import { AGENT_LINK_PATH } from '../../src/compute/protocol.ts';
import { startWorker } from '../../src/compute/worker.ts';
import { createAgentHub } from '../../src/control/agents/hub.ts';
import { createInstancesRepo } from '../../src/control/instances/repo.ts';
import { createInstancesService } from '../../src/control/instances/service.ts';
import { createGateway } from '../../src/gateway/gateway.ts';
import { notFound } from '../../src/http/problem.ts';
import { rejectUpgrade } from '../../src/http/upgrade.ts';
import { createInProcessQueue } from '../../src/invocation/queue.ts';
import { createInvocationsRepo } from '../../src/invocation/repo.ts';
import { invocationRoutes } from '../../src/invocation/routes.ts';
import { createInvocationService } from '../../src/invocation/service.ts';
import { createApp } from '../../src/http/app.ts';
import { withOpenApi } from '../../src/http/openapi.ts';
import { createLogger } from '../../src/logger.ts';
import { openStore, type Store } from '../../src/store/store.ts';
import { Migrator } from 'kysely/migration';
import { tasksMigration, type TasksDatabase } from '../../src/control/tasks/migration.ts'; // +tasks
import { createTasksPlane } from '../../src/control/tasks/plane.ts'; // +tasks
import { tasksSettingsSchema, type TasksSettings } from '../../src/control/tasks/settings.ts'; // +tasks
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { loadConfig, type ConfigInput } from '../../src/config.ts';
import { createDatabase, type TestDatabase } from '../helpers/databases.ts';
import { request, type RequestOptions, type TestResponse } from '../helpers/http.ts';
import { createResponseValidator, type ResponseValidator } from '../helpers/openapi.ts';

export const SAMPLES_CATALOG = fileURLToPath(new URL('../../../samples/images.yaml', import.meta.url));

export interface TasksPlatform {
  /** http(s)://localhost:<port> */
  url: string;
  port: number;
  hosts: { api: string; keys: string };
  /** Present only on the first start of an installation: print it once. */
  bootstrapSecret?: string;
  adminSigningKeyFile: string;
  samples: DeployedSample[];
  close(): Promise<void>;
}

export interface TasksPlatformOptions {
  /** +tasks: config.tasks (until config.ts mounts tasksSettingsSchema). */
  tasks?: Partial<TasksSettings>;
  logDestination?: DestinationStream;
  now?: () => Date;
  /** Deploy samples/functions.json into the default account on the local cluster (npm start). */
  samples?: boolean;
}

const VERSION = '0.1.0';

export async function startTasksPlatform(config: Config, options: TasksPlatformOptions = {}): Promise<TasksPlatform> {
  const now = options.now ?? (() => new Date());
  const log = createLogger(config.log.level, options.logDestination);
  const store = await openStore(config.store);
  try {
    await migrateTasks(store); // +tasks (store/migrations.ts '0004_tasks')
    const settings = createSettingsRepo(store.db);
    const startedAt = now().toISOString();
    const box = await loadSecretBox(settings, { ...config.secrets, dataDir: config.store.dataDir, now: startedAt });

    const accounts = createAccountsService(createAccountsRepo(store.db), now);
    const { account } = await accounts.ensureBootstrapAccount(config.api.accountBootstrap);

    const bootstrap = await ensureBootstrapSecret(settings, startedAt);
    const tokenKey = await loadTokenKey(settings, box, startedAt);
    const adminSigningKeyFile = config.admin.signingKeyFile ?? path.join(config.store.dataDir, 'admin-signing-key.pem');
    const adminKey = await loadAdminKey(adminSigningKeyFile, { create: !config.admin.signingKeyFile });

    const keysRepo = createKeysRepo(store.db);
    const verifier = createCredentialVerifier({
      repo: keysRepo, tokenKey, adminKey, bootstrapSecretHash: bootstrap.hash,
      serviceId: config.keys.serviceId, recheckMs: config.keys.recheckMs, now: () => now().getTime(),
    });
    const keys = createKeyService({
      repo: keysRepo, accounts, tokenKey, serviceId: config.keys.serviceId, defaultAccountId: account.ncaId,
      tokenLifetimeSeconds: config.keys.tokenLifetimeSeconds, now,
    });
    const clusters = createClustersService(createClustersRepo(store.db), now);
    const localCluster = config.compute.localCluster.enabled
      ? await ensureLocalCluster(settings, clusters, box, { ...config.compute.localCluster, ncaId: account.ncaId, now: startedAt })
      : undefined;
    const functionsRepo = createFunctionsRepo(store.db);
    const deploymentsRepo = createDeploymentsRepo(store.db);
    const functions = createFunctionsService({ repo: functionsRepo, accounts, box, now });
    const deployments = createDeploymentsService(deploymentsRepo, functions, clusters, now);
    const registry = createRegistryService(createRegistryRepo(store.db), accounts, box, now);
    const health = createHealthService([{ name: 'db_client', probe: () => store.ping() }]);

    const instances = createInstancesService({
      repo: createInstancesRepo(store.db), deployments: deploymentsRepo, functions, functionsRepo, clusters, registry, log, now,
    });
    functions.useInstances(instances.activeInstances);
    deployments.onChange(() => void instances.reconcile());
    const invocation = createInvocationService({
      queue: createInProcessQueue(), repo: createInvocationsRepo(store.db), functionsRepo, deployments: deploymentsRepo, instances, log, now,
      maxQueueDepth: config.invocation.maxQueueDepth, maxResultBytes: config.invocation.maxResultBytes,
      resultRetentionMs: config.invocation.resultRetentionSeconds * 1000,
    });
    instances.onReady((versionId, ready) => invocation.ready(versionId, ready));
    instances.onProgress((progress) => invocation.progress(progress));
    const tasks = createTasksPlane({ // +tasks
      db: store.db.withTables<TasksDatabase>(), box, accounts, clusters, log, now, dataDir: config.store.dataDir, registry,
      settings: tasksSettingsSchema.parse(options.tasks ?? {}),
    });
    const agentHub = createAgentHub(clusters, instances, log, tasks.scheduler); // +tasks: the scheduler

    const apiRoutes = withOpenApi([
      // The hot path first: Express tries routes in order.
      ...invocationRoutes(invocation, functionsRepo, {
        defaultSeconds: config.invocation.pollSeconds, sseDefaultSeconds: config.invocation.ssePollSeconds,
        maxSeconds: config.invocation.maxPollSeconds, maxRequestBytes: config.invocation.maxRequestBytes,
      }),
      ...healthRoutes(health),
      ...accountRoutes(accounts, config.api.accountBootstrap.limits),
      ...functionRoutes(functions),
      ...deploymentRoutes(deployments),
      ...registryRoutes(registry),
      ...clusterRoutes(clusters),
      ...tasks.routes, // +tasks
      whoamiRoute(),
    ], { title: 'svc platform API', version: VERSION, description: 'Functions, deployments, invocation, tasks, accounts' });
    const keyServiceRoutes = withOpenApi(keyRoutes(keys, tokenKey),
      { title: 'svc key service', version: VERSION, description: 'API keys and management tokens' });

    const appOptions = { verifier, log, bodyLimit: config.gateway.bodyLimit };
    const gateway = createGateway({
      address: config.gateway.address,
      api: createApp({ ...appOptions, routes: apiRoutes }),
      keys: createApp({ ...appOptions, routes: keyServiceRoutes }),
      apiUpgrade: (req, socket, head) => {
        if ((req.url ?? '').split('?')[0] === AGENT_LINK_PATH) return void agentHub.upgrade(req, socket, head);
        rejectUpgrade(req, socket, notFound(`No WebSocket endpoint at ${(req.url ?? '').split('?')[0]}`));
      },
      tls: config.gateway.tlsCert && config.gateway.tlsKey ? { cert: config.gateway.tlsCert, key: config.gateway.tlsKey } : undefined,
    });
    await invocation.recover();
    await instances.start();
    await tasks.start(); // +tasks
    const port = await gateway.listen(config.gateway.port, config.gateway.host);
    const scheme = config.gateway.tlsCert ? 'https' : 'http';
    log.info({ port, address: config.gateway.address, store: store.dialect }, 'gateway listening');
    // The local cluster's agent links to this gateway over loopback, exactly as a remote agent would.
    const worker = localCluster && config.compute.inProcessAgent ? await startWorker({
      settings: config.compute.agent, dataDir: config.store.dataDir, declaredGpus: config.compute.localCluster.gpus, log,
      link: {
        server: `${scheme}://127.0.0.1:${port}`, credential: localCluster.agentCredential, apiHost: `${gateway.hosts.api}:${port}`,
        ca: config.gateway.tlsCert ? readFileSync(config.gateway.tlsCert, 'utf8') : undefined,
      },
    }) : undefined;

    const localGpu = config.compute.localCluster.gpus[0];
    const samples = options.samples && localCluster && localGpu ? await deploySamples({
      ncaId: account.ncaId, functions, functionsRepo, deployments, skip: ['streaming-app'],
      gpu: { name: localGpu.name, instanceType: (localGpu.instanceTypes.find((type) => type.default) ?? localGpu.instanceTypes[0]).name },
    }) : [];

    return {
      url: `${scheme}://localhost:${port}`,
      samples,
      port,
      hosts: gateway.hosts,
      bootstrapSecret: bootstrap.secret,
      adminSigningKeyFile,
      async close() {
        await worker?.close();
        agentHub.close();
        await gateway.close();
        await instances.stop();
        await tasks.stop(); // +tasks
        await invocation.close();
        await store.close();
        log.flush();
      },
    };
  } catch (error) {
    await store.close();
    throw error;
  }
}

/** +tasks: the tasks migration, with its own migration table until store/migrations.ts registers it. */
async function migrateTasks(store: Store): Promise<void> {
  const migrator = new Migrator({
    db: store.db, migrationTableName: 'svc_tasks_migration', migrationLockTableName: 'svc_tasks_migration_lock',
    provider: { getMigrations: async () => ({ '0004_tasks': tasksMigration(store.dialect) }) },
  });
  const { error } = await migrator.migrateToLatest();
  if (error) throw error;
}

// +tasks: the test platform of api/test/helpers/platform.ts (startTestPlatform), over startTasksPlatform
// and with the repository's sample catalog (samples/images.yaml holds local/task-progress).
export interface TaskTestPlatform {
  platform: TasksPlatform;
  database: TestDatabase;
  url: string;
  bootstrapSecret: string;
  logs: string[];
  /** Moves the platform's clock. */
  advance(ms: number): void;
  api(method: string, path: string, options?: RequestOptions): Promise<TestResponse>;
  keys(method: string, path: string, options?: RequestOptions): Promise<TestResponse>;
  /** A management token (SVC_TOKEN) for `ncaId` (default account unless given). */
  token(options?: { ncaId?: string; scopes?: string[] }): Promise<string>;
  /** An account-administration JWT signed with the installation's admin key. */
  adminToken(options?: { expiresInSeconds?: number }): Promise<string>;
  /** An opaque key minted with `token`; task keys with task: true. */
  apiKey(token: string, scopes: string[], options?: { task?: boolean; expiresAt?: string }): Promise<string>;
  restart(overrides?: ConfigInput): Promise<void>;
  close(): Promise<void>;
}

export interface TaskTestPlatformOptions {
  /** +tasks settings. */
  tasks?: Partial<TasksSettings>;
  backend?: 'sqlite' | 'postgres';
  config?: ConfigInput;
  database?: TestDatabase;
  /** CA to trust when the platform serves TLS. */
  ca?: string;
}

export async function startTaskTestPlatform(options: TaskTestPlatformOptions = {}): Promise<TaskTestPlatform> {
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
        imageCatalog: SAMPLES_CATALOG, healthIntervalMs: 200, healthFailureThreshold: 2, restartInitialMs: 100, restartMaxMs: 400,
        stopGraceMs: 1000, udpPortRange: '48100-48199',
      },
    },
  }, options.config ?? {}, overrides));
  let platform = await startTasksPlatform(configFor(), { logDestination: logDestination as never, now, tasks: options.tasks });
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

  const test: TaskTestPlatform = {
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
        bearer: bootstrapSecret,
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
      platform = await startTasksPlatform(configFor(overrides), { logDestination: logDestination as never, now, tasks: options.tasks });
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
