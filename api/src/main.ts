// Composition root: config → store → planes → listen. Nothing else lives here. startPlatform reads top-down;
// each step after it composes one concern, in the order they start (they stop in reverse: process/closers.ts).
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname, networkInterfaces } from 'node:os';
import path from 'node:path';
import type { DestinationStream } from 'pino';
import type { Config } from './config.ts';
import { createAutoscalerPlane, type AutoscalerPlane } from './autoscaler/plane.ts';
import { accountRoutes } from './control/accounts/routes.ts';
import { createAgentHub } from './control/agents/hub.ts';
import { assetRoutes } from './control/assets/routes.ts';
import { clusterRoutes } from './control/clusters/routes.ts';
import { deploymentRoutes } from './control/deployments/routes.ts';
import { functionRoutes } from './control/functions/routes.ts';
import { healthRoutes } from './control/health/routes.ts';
import { createHealthService } from './control/health/service.ts';
import { createInstancesRepo } from './control/instances/repo.ts';
import { InstancesService } from './control/instances/service.ts';
import { whoamiRoute } from './control/keys/routes.ts';
import { relayLogAsks } from './control/logs/relay.ts';
import { logRoutes } from './control/logs/routes.ts';
import { createLogsService, type LogsService } from './control/logs/service.ts';
import { PlacementFence } from './control/placement/fence.ts';
import { createLeaseRepo, PlacementElection } from './control/placement/lease.ts';
import { createControlPlane, type ControlPlane } from './control/plane.ts';
import { registryRoutes } from './control/registry/routes.ts';
import { deploySamples, type DeployedSample, type StreamingDemo } from './control/samples.ts';
import { createStatsPlane } from './control/stats/plane.ts';
import { createTasksPlane } from './control/tasks/plane.ts';
import { telemetryRoutes } from './control/telemetries/routes.ts';
import { startWorker, type Isolation } from './compute/worker.ts';
import { createGatewayPlane, type GatewayPlane } from './gateway/plane.ts';
import { createApp } from './http/app.ts';
import { forwarding } from './http/forward.ts';
import { isLoopbackHost } from './http/host.ts';
import { createMetrics, metricsRoute, type PlatformMetrics } from './http/metrics.ts';
import { withOpenApi } from './http/openapi.ts';
import type { Route } from './http/route.ts';
import { createInvocationPlane, type InvocationPlane } from './invocation/plane.ts';
import { hostRoutedRoute, invocationRoutes, type InvocationObserver, type InvocationRouteOptions } from './invocation/routes.ts';
import { createLogger, type Logger } from './logger.ts';
import { Closers } from './process/closers.ts';
import { watchEventLoop } from './process/loop-health.ts';
import { portInUse } from './process/ports.ts';
import { openDatabase } from './database.ts';
import { startPlacement, type PlacementRole } from './roles/placement.ts';
import { createStreamingPlane } from './streaming/plane.ts';
import { isSignIn } from './streaming/request.ts';
import { sessionRoutes } from './streaming/routes.ts';
import { signInHandler } from './streaming/sign-in.ts';
import { ensurePrivateDir, type Store } from './store/store.ts';
import { createTelemetryExport, exportInstanceLogs } from './telemetry/plane.ts';
import type { PlacementLogFeed } from './telemetry/log-feed.ts';
import type { TelemetrySourcesOptions } from './telemetry/sources.ts';
import type { TurnService } from './turn/server.ts';

export interface Platform {
  /** http(s)://localhost:<port> */
  url: string;
  port: number;
  hosts: { api: string; keys: string; invocation: string };
  /** Present while it works (not used yet, not expired): print it. */
  bootstrapSecret?: string;
  bootstrapExpiresAt: string;
  /** The bearer GET /metrics wants when the platform generated it (the gateway is off loopback, no metrics.token). */
  metricsToken?: string;
  adminSigningKeyFile: string;
  samples: DeployedSample[];
  /** With samples: the streaming sample and a key the demo proxy invokes it with. */
  streamingDemo?: StreamingDemo;
  /** The STUN/TURN server streaming sessions are given. */
  turn: TurnService['kind'];
  /** How the local cluster's instances are kept apart, when this process runs its agent. */
  isolation?: Isolation;
  close(): Promise<void>;
}

export interface PlatformOptions {
  logDestination?: DestinationStream;
  now?: () => Date;
  /** Deploy samples/functions.json into the default account on the local cluster (npm start). */
  samples?: boolean;
}

const VERSION = '0.1.0';

/** What every step of start-up is given. */
interface Root {
  config: Config;
  store: Store;
  log: Logger;
  now: () => Date;
  /** What has started: each step adds what it starts, as it starts it. */
  closers: Closers;
}

export async function startPlatform(config: Config, options: PlatformOptions = {}): Promise<Platform> {
  const now = options.now ?? (() => new Date());
  const log = createLogger(config.log.level, options.logDestination);
  // Keys, the agent's work dirs and (embedded) the store live here, whichever store is used.
  ensurePrivateDir(config.store.dataDir);
  const store = await openDatabase(config.store);
  // What has started, stopped in reverse order by close() or by a start-up that fails half-way.
  const closers = new Closers(() => store.close());
  try {
    const root: Root = { config, store, log, now, closers };
    // The telemetries need the export, and the export the tasks, both made later: each gets a closure,
    // called only once start-up is over.
    const control = await createControlPlane({
      config, db: store.db, log, now, forgetTelemetry: (telemetryId) => observed.telemetryExport?.forget(telemetryId),
    });
    closers.add(() => control.assets.stop());
    const observed = await startObservability(root, control, (taskId) => work.tasks.service.telemetriesOf(taskId));
    const work = await startWork(root, control, observed);
    const { logs, logFeed } = startLogs(root, control, observed, work);
    const streaming = await startStreaming(root, control, observed, work);
    const stats = startStats(root, control, work, streaming);
    const invocationOptions = invocationRouteOptions(root, control, observed, work.invocationPlane, stats);
    const routes = apiRoutes(config, { control, observed, work, logs, streaming, stats, invocationOptions });
    const { gateway, placementRole } = await startServing(root, { control, observed, work, logFeed, streaming, routes, invocationOptions });
    const { port, scheme } = await listen(root, gateway, work.autoscaler, placementRole);
    const worker = await startLocalAgent(root, control, { scheme, port, apiHost: `${gateway.hosts.api}:${port}` });
    if (worker?.keeperOrigin) work.invocationPlane.agentInProcess(worker.keeperOrigin);
    const { samples, streamingDemo } = options.samples ? await deployLocalSamples(root, control) : { samples: [], streamingDemo: undefined };
    return {
      url: `${scheme}://localhost:${port}`,
      samples,
      streamingDemo,
      turn: streaming.turn.kind,
      isolation: worker?.isolation,
      port,
      hosts: gateway.hosts,
      bootstrapSecret: control.bootstrap.unused,
      bootstrapExpiresAt: control.bootstrap.expiresAt,
      metricsToken: observed.generatedMetricsToken,
      adminSigningKeyFile: control.adminSigningKeyFile,
      async close() {
        await closers.closeAll();
        log.flush();
      },
    };
  } catch (error) {
    await closers.closeAll();
    throw error;
  }
}

type Observability = Awaited<ReturnType<typeof startObservability>>;
type Work = Awaited<ReturnType<typeof startWork>>;
type Streaming = Awaited<ReturnType<typeof startStreaming>>;
type Stats = ReturnType<typeof startStats>;

/** /metrics' registry, the export to the owners' telemetries, and the bearer /metrics wants off loopback. */
async function startObservability({ config, log, closers }: Root, control: ControlPlane, taskTelemetries: TelemetrySourcesOptions['task']) {
  const metrics = createMetrics();
  const telemetryExport = createTelemetryExport({
    settings: config.telemetry, log, registry: metrics.registry,
    functionsRepo: control.functionsRepo, functions: control.functions, telemetries: control.telemetries, taskTelemetries,
  });
  if (telemetryExport) closers.add(() => telemetryExport.close());
  // Off loopback, /metrics (every account's ids) always wants a bearer: the configured one or one made here.
  const generatedMetricsToken = config.metrics.token || isLoopbackHost(config.gateway.host)
    ? undefined : await control.sealed('metrics.token');
  return { metrics, telemetryExport, generatedMetricsToken };
}

/**
 * What runs the work: the autoscaler, placement's instances, the invocation plane, the tasks and the hub the
 * agents link to, with the health that reports on them.
 */
async function startWork(root: Root, control: ControlPlane, { metrics, telemetryExport }: Observability) {
  const { config, store, log, now, closers } = root;
  const { functionsRepo, assets, sealed, clusters } = control;
  const autoscaler = createAutoscalerPlane({ db: store.db, metrics, settings: config.autoscaler, log, now });
  const eventLoop = watchEventLoop(config.guard);
  closers.add(() => eventLoop.stop());
  const { election, instances } = createInstances(root, control, autoscaler, metrics);
  // Agents link to the replica that runs placement: it puts assets on their hosts, the others ask it (roles/placement.ts).
  const invocationPlane = await createInvocationPlane({
    settings: config.invocation, db: store.db, functionsRepo, instances, blobs: control.blobs, signer: control.signer, log, now,
    stageHere: config.compute.placement === true ? ({ clusterId, ...request }) => agentHub.stage(clusterId, request) : undefined,
    stagingPaths: (assetIds) => assets.stagingPaths(assetIds), replicasKey: () => sealed('replicas.signing_key'),
    nodeLive: (nodeId) => clusters.nodeLive(nodeId),
  });
  closers.add(() => invocationPlane.close());
  const health = createHealthService([{ name: 'db_client', probe: () => store.ping() }, eventLoop, ...autoscaler.health, ...invocationPlane.health]);
  metrics.watchHealth(() => health.report());
  metrics.watchLoad(() => invocationPlane.invocation.load());
  const tasks = createTasksPlane({
    db: store.db, box: control.box, accounts: control.accounts, clusters, log, now, dataDir: config.store.dataDir, registry: control.registry,
    settings: config.tasks, hosts: instances, checkTelemetries: control.telemetries.checkReferences,
    onOutput: (taskId, instanceId, lines) => telemetryExport?.exportLogLines(taskId, lines.map((text) => ({ text, instanceId }))),
  });
  instances.countTasks(tasks.scheduler);
  const agentHub = createAgentHub({ clusters, instances, log, tasks: tasks.scheduler, epoch: () => election?.lastEpoch, kept: invocationPlane.kept });
  return { autoscaler, election, instances, invocationPlane, health, tasks, agentHub };
}

/** Placement's instances, and what tells them to reconcile or reads what runs. */
function createInstances({ config, store, log, now }: Root, control: ControlPlane, autoscaler: AutoscalerPlane, metrics: PlatformMetrics) {
  const { functions, deployments } = control;
  // Placement's term, when replicas elect who runs it: the instance rows' writes are fenced by it.
  const { placement } = config.compute;
  const election = placement === 'elected' ? new PlacementElection({
    repo: createLeaseRepo(store.db), replicaId: `${hostname()}-${randomUUID().slice(0, 8)}`, leaseMs: config.compute.placementLeaseMs, log,
  }) : undefined;
  const instances = new InstancesService({
    repo: createInstancesRepo(store.db, election && new PlacementFence(store.db, () => election.epoch)), nodes: control.nodesRepo,
    leaseMs: config.compute.agentLeaseMs, deployments: control.deploymentsRepo, functions, functionsRepo: control.functionsRepo,
    clusters: control.clusters, registry: control.registry, log, now, desired: autoscaler.desiredCounts, places: placement === true,
    metricsRegistry: metrics.registry, instanceLimits: control.accounts.instanceLimits,
  });
  autoscaler.onApplied(() => void instances.reconcile());
  metrics.watchInstances(() => instances.instanceCounts());
  functions.useInstances(instances.activeInstances);
  deployments.useHealthInfo(instances.activeInstances.healthInfo);
  deployments.onChange(() => void instances.reconcile());
  return { election, instances };
}

/** The owners' logs, and the instances' output sent to the export. */
function startLogs({ config, log, now }: Root, control: ControlPlane, { telemetryExport }: Observability, work: Work) {
  const { agentHub, instances } = work;
  const { links } = work.invocationPlane;
  // Agents link to the replica that runs placement: only it can ask them for logs; the others ask it.
  const logRelay = config.compute.placement === true ? agentHub.logs : links && relayLogAsks(links.logs);
  const logs = createLogsService({ functions: control.functions, tasks: work.tasks.service, clusters: control.clusters, now, ...(logRelay ? { relay: logRelay } : {}) });
  const logFeed = exportInstanceLogs({ telemetryExport, functionsRepo: control.functionsRepo, logs, hub: agentHub, instances, now, log });
  return { logs, logFeed };
}

/** Streaming sessions: the STUN/TURN server they are given, the broker and the owners' listing. */
async function startStreaming({ config, store, log, now, closers }: Root, control: ControlPlane, { metrics }: Observability, work: Work) {
  const plane = await createStreamingPlane({
    settings: config.streaming, db: store.db, verifier: control.verifier, functionsRepo: control.functionsRepo, functions: control.functions,
    instances: work.instances, placesHere: config.compute.placement === true, links: work.invocationPlane.links, log, now,
    turn: { ...config.turn, secret: config.turn.secret ?? await control.sealed('turn.secret'), runDir: path.join(config.store.dataDir, 'run') },
  });
  closers.add(() => plane.turn.close());
  metrics.watchLoad(() => plane.broker.load());
  // STREAMING functions scale on sessions: spare instances follow each start and end at once.
  plane.broker.onChange(() => work.autoscaler.nudge());
  return plane;
}

/** The owners' numbers: every invocation's answer, and both planes' load sampled. */
function startStats({ config, store, log, now, closers }: Root, control: ControlPlane, work: Work, streaming: Streaming) {
  const stats = createStatsPlane({
    db: store.db, functionsRepo: control.functionsRepo, settings: config.stats, log, now,
    *loads() {
      yield* work.invocationPlane.invocation.load();
      yield* streaming.broker.load();
    },
  });
  stats.recorder.start();
  closers.add(() => stats.recorder.stop());
  return stats;
}

/** How the invocation routes (on the api host and on the invocation host) poll, admit and tell of each answer. */
function invocationRouteOptions(
  { config, log }: Root, control: ControlPlane, { metrics, telemetryExport }: Observability, invocationPlane: InvocationPlane, stats: Stats,
): InvocationRouteOptions {
  const observe: InvocationObserver = (ref, status, seconds, requestId) => {
    metrics.observeInvocation(ref, status, seconds);
    stats.recorder.observe(ref, status, seconds);
    telemetryExport?.recordInvocation(ref, requestId, status, seconds);
  };
  return {
    limits: {
      defaultSeconds: config.invocation.pollSeconds, sseDefaultSeconds: config.invocation.ssePollSeconds,
      maxSeconds: config.invocation.maxPollSeconds, maxRequestBytes: config.invocation.maxRequestBytes,
    },
    log, observe, checkAssets: control.assets.check, largeResults: invocationPlane.largeResults, admit: invocationPlane.admit,
  };
}

/** The api host's routes, with their OpenAPI document. */
function apiRoutes(config: Config, parts: {
  control: ControlPlane; observed: Observability; work: Work; logs: LogsService; streaming: Streaming;
  stats: Stats; invocationOptions: InvocationRouteOptions;
}): Route[] {
  const { control, work } = parts;
  const { invocation, resolver } = work.invocationPlane;
  return withOpenApi([
    // The hot path first: Express tries routes in order.
    ...invocationRoutes(invocation, resolver, parts.invocationOptions),
    ...healthRoutes(work.health),
    metricsRoute(parts.observed.metrics, { token: config.metrics.token ?? parts.observed.generatedMetricsToken }),
    whoamiRoute(),
    ...accountRoutes(control.accounts, config.api.accountBootstrap.limits),
    ...functionRoutes(control.functions),
    ...deploymentRoutes(control.deployments),
    ...registryRoutes(control.registry),
    ...telemetryRoutes(control.telemetries),
    ...assetRoutes(control.assets),
    ...clusterRoutes(control.clusters),
    ...parts.stats.routes,
    ...work.tasks.routes,
    ...logRoutes(parts.logs),
    ...sessionRoutes(parts.streaming.listing),
    ...work.autoscaler.routes,
  ], { title: 'svc platform API', version: VERSION, description: 'Functions, deployments, invocation, tasks, accounts' });
}

/**
 * The api host's app, the requests a restart left (invocation.recover), the placement role and the gateway
 * in front of them all. Placement starts before the gateway is made: the gateway hands it the agents' links.
 */
async function startServing({ config, log, closers }: Root, parts: {
  control: ControlPlane; observed: Observability; work: Work; logFeed?: PlacementLogFeed; streaming: Streaming;
  routes: Route[]; invocationOptions: InvocationRouteOptions;
}) {
  const { control, work, streaming: { broker: streaming } } = parts;
  const { invocation, links } = work.invocationPlane;
  const appOptions = { verifier: control.verifier, log, bodyLimit: config.gateway.bodyLimit, metrics: parts.observed.metrics };
  // The reference's streaming sign-in (X-SVC-ABSORB: true) lives on any path of the api host; the replica
  // running placement brokers sessions, the others hand sign-ins (and session sockets: gateway/plane.ts) to it.
  const sessionsElsewhere = () => placementRole.sessionsElsewhere();
  const api = createApp({
    ...appOptions, routes: parts.routes, host: 'api', handlers: [forwarding(isSignIn, sessionsElsewhere), signInHandler(streaming)], handled: isSignIn,
  });
  const hostRouted = hostRoutedRoute(invocation, parts.invocationOptions);
  await invocation.recover();
  const placementRole = await startPlacement({
    config, log, clusters: control.clusters, instances: work.instances, tasks: work.tasks, hub: work.agentHub, sessionsOf: streaming.sessionsOf,
    broker: streaming, election: work.election, links, beside: () => parts.logFeed?.start() ?? (() => {}),
    gatewayCa: config.gateway.tlsCert && readFileSync(config.gateway.tlsCert, 'utf8'),
  });
  const gateway = createGatewayPlane({
    settings: config.gateway, version: VERSION, appOptions, api, keyRoutes: control.keyRoutes, hostRouted, broker: streaming, placement: placementRole,
  });
  // Placement stops first: an elected holder hands its lease over before the gateway drains.
  closers.add(() => gateway.close(), () => streaming.close(), () => work.autoscaler.stop(), () => placementRole.close());
  return { gateway, placementRole };
}

/** Scaling rounds start, the gateway listens, and placement learns where the other replicas reach this one. */
async function listen({ config, log, store }: Root, gateway: GatewayPlane, autoscaler: AutoscalerPlane, placementRole: PlacementRole) {
  autoscaler.start();
  const port = await gateway.listen(config.gateway.port, config.gateway.host).catch((error: NodeJS.ErrnoException) => {
    throw error.code === 'EADDRINUSE' ? portInUse('the gateway', `${config.gateway.host}:${config.gateway.port}`, 'gateway.host, gateway.port: SVC_HOST, SVC_PORT') : error;
  });
  const scheme = config.gateway.tlsCert ? 'https' : 'http';
  log.info({ port, address: config.gateway.address, store: store.dialect }, 'gateway listening');
  placementRole.listening(config.gateway.replicaUrl ?? replicaUrlOf(scheme, config.gateway.host, port));
  return { port, scheme };
}

/** The local cluster's agent in this process, where this process runs placement (and its agent is wanted). */
async function startLocalAgent({ config, log, closers }: Root, control: ControlPlane, gateway: { scheme: string; port: number; apiHost: string }) {
  const worker = control.localCluster && config.compute.inProcessAgent && config.compute.placement === true
    ? await startLocalWorker(config, { ...gateway, credential: control.localCluster.agentCredential }, log)
    : undefined;
  if (worker) closers.add(() => worker.close());
  return worker;
}

/** npm start's samples, deployed into the default account on the local cluster's first GPU (none without one). */
async function deployLocalSamples({ config, now }: Root, control: ControlPlane): Promise<{ samples: DeployedSample[]; streamingDemo?: StreamingDemo }> {
  const localGpu = config.compute.localCluster.gpus[0];
  if (!control.localCluster || !localGpu) return { samples: [], streamingDemo: undefined };
  return deploySamples({
    ncaId: control.defaultAccount.ncaId, functions: control.functions, functionsRepo: control.functionsRepo, deployments: control.deployments,
    keys: control.keys, serviceId: config.keys.serviceId, now,
    gpu: { name: localGpu.name, instanceType: (localGpu.instanceTypes.find((type) => type.default) ?? localGpu.instanceTypes[0]).name },
  });
}

/**
 * The local cluster's agent, in this process: it links to this gateway over loopback, exactly as a remote
 * agent would.
 */
function startLocalWorker(config: Config, gateway: { scheme: string; port: number; apiHost: string; credential: string }, log: Logger) {
  const ca = config.gateway.tlsCert ? readFileSync(config.gateway.tlsCert, 'utf8') : undefined;
  return startWorker({
    settings: config.compute.agent, dataDir: config.store.dataDir, declaredGpus: config.compute.localCluster.gpus, log,
    link: { server: `${gateway.scheme}://127.0.0.1:${gateway.port}`, credential: gateway.credential, apiHost: gateway.apiHost, ca },
    // A sandboxed instance may call the gateway's public port; it never sees the platform's files.
    sandbox: {
      doors: [gateway.port],
      hidden: [config.assets.dir, config.gateway.tlsKey, config.admin.signingKeyFile].filter((file) => file !== undefined),
    },
  });
}

/** Where the other replicas reach this one by default: the host the gateway listens on, or this machine's first address off loopback. */
function replicaUrlOf(scheme: string, host: string, port: number): string {
  const own = Object.values(networkInterfaces()).flat().find((entry) => entry && !entry.internal && entry.family === 'IPv4')?.address;
  const reached = host === '0.0.0.0' || host === '::' ? own ?? '127.0.0.1' : host;
  return `${scheme}://${reached.includes(':') ? `[${reached}]` : reached}:${port}`;
}
