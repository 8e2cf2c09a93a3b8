// Composition root: config → store → planes → listen. Nothing else lives here.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname, networkInterfaces } from 'node:os';
import path from 'node:path';
import type { DestinationStream } from 'pino';
import type { Config } from './config.ts';
import { createAutoscalerPlane } from './autoscaler/plane.ts';
import { accountRoutes } from './control/accounts/routes.ts';
import { healthRoutes } from './control/health/routes.ts';
import { createHealthService } from './control/health/service.ts';
import { clusterRoutes } from './control/clusters/routes.ts';
import { deploymentRoutes } from './control/deployments/routes.ts';
import { createControlPlane } from './control/plane.ts';
import { functionRoutes } from './control/functions/routes.ts';
import { assetRoutes } from './control/assets/routes.ts';
import { registryRoutes } from './control/registry/routes.ts';
import { createStatsPlane } from './control/stats/plane.ts';
import { createTasksPlane } from './control/tasks/plane.ts';
import { telemetryRoutes } from './control/telemetries/routes.ts';
import { createTelemetryExport, exportInstanceLogs } from './telemetry/plane.ts';
import { deploySamples, type DeployedSample, type StreamingDemo } from './control/samples.ts';
import { whoamiRoute } from './control/keys/routes.ts';
import { startWorker, type Isolation } from './compute/worker.ts';
import { createAgentHub } from './control/agents/hub.ts';
import { logRoutes } from './control/logs/routes.ts';
import { relayLogAsks } from './control/logs/relay.ts';
import { createLogsService } from './control/logs/service.ts';
import { createInstancesRepo } from './control/instances/repo.ts';
import { PlacementFence } from './control/placement/fence.ts';
import { createLeaseRepo, PlacementElection } from './control/placement/lease.ts';
import { InstancesService } from './control/instances/service.ts';
import { createGatewayPlane } from './gateway/plane.ts';
import { createInvocationPlane } from './invocation/plane.ts';
import { hostRoutedRoute, invocationRoutes, type InvocationObserver } from './invocation/routes.ts';
import { sessionRoutes } from './streaming/routes.ts';
import { isSignIn } from './streaming/request.ts';
import { signInHandler } from './streaming/sign-in.ts';
import { createStreamingPlane } from './streaming/plane.ts';
import type { TurnService } from './turn/server.ts';
import { createApp } from './http/app.ts';
import { ensurePrivateDir } from './store/store.ts';
import { forwarding } from './http/forward.ts';
import { isLoopbackHost } from './http/host.ts';
import { createMetrics, metricsRoute } from './http/metrics.ts';
import { withOpenApi } from './http/openapi.ts';
import { createLogger, type Logger } from './logger.ts';
import { Closers } from './process/closers.ts';
import { watchEventLoop } from './process/loop-health.ts';
import { portInUse } from './process/ports.ts';
import { openDatabase } from './database.ts';
import { startPlacement } from './roles/placement.ts';

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

export async function startPlatform(config: Config, options: PlatformOptions = {}): Promise<Platform> {
  const now = options.now ?? (() => new Date());
  const log = createLogger(config.log.level, options.logDestination);
  // Keys, the agent's work dirs and (embedded) the store live here, whichever store is used.
  ensurePrivateDir(config.store.dataDir);
  const store = await openDatabase(config.store);
  // What has started, stopped in reverse order by close() or by a start-up that fails half-way.
  const closers = new Closers(() => store.close());
  try {
    const control = await createControlPlane({
      config, db: store.db, log, now, forgetTelemetry: (telemetryId) => telemetryExport?.forget(telemetryId),
    });
    closers.add(() => control.assets.stop());
    const {
      sealed, box, accounts, defaultAccount: account, bootstrap, adminSigningKeyFile, verifier, keys, keyRoutes: keyServiceRoutes,
      nodesRepo, clusters, localCluster, functionsRepo, deploymentsRepo, telemetries, functions, deployments, registry, blobs, signer, assets,
    } = control;
    const metrics = createMetrics();
    const telemetryExport = createTelemetryExport({
      settings: config.telemetry, log, registry: metrics.registry, functionsRepo, functions, telemetries,
      taskTelemetries: (taskId) => taskPlane.service.telemetriesOf(taskId),
    });
    if (telemetryExport) closers.add(() => telemetryExport.close());
    // Off loopback, /metrics (every account's ids) always wants a bearer: the configured one or one made here.
    const generatedMetricsToken = config.metrics.token || isLoopbackHost(config.gateway.host)
      ? undefined : await sealed('metrics.token');
    const autoscaler = createAutoscalerPlane({ db: store.db, metrics, settings: config.autoscaler, log, now });
    const eventLoop = watchEventLoop(config.guard);
    closers.add(() => eventLoop.stop());

    // Placement's term, when replicas elect who runs it: the instance rows' writes are fenced by it.
    const { placement } = config.compute;
    const election = placement === 'elected' ? new PlacementElection({
      repo: createLeaseRepo(store.db), replicaId: `${hostname()}-${randomUUID().slice(0, 8)}`, leaseMs: config.compute.placementLeaseMs, log,
    }) : undefined;
    const instances = new InstancesService({
      repo: createInstancesRepo(store.db, election && new PlacementFence(store.db, () => election.epoch)), nodes: nodesRepo, leaseMs: config.compute.agentLeaseMs,
      deployments: deploymentsRepo, functions, functionsRepo, clusters, registry, log, now,
      desired: autoscaler.desiredCounts, places: placement === true, metricsRegistry: metrics.registry, instanceLimits: accounts.instanceLimits,
    });
    autoscaler.onApplied(() => void instances.reconcile());
    metrics.watchInstances(() => instances.instanceCounts());
    functions.useInstances(instances.activeInstances);
    deployments.useHealthInfo(instances.activeInstances.healthInfo);
    deployments.onChange(() => void instances.reconcile());
    // Agents link to the replica that runs placement: it puts assets on their hosts, the others ask it (roles/placement.ts).
    const invocationPlane = await createInvocationPlane({
      settings: config.invocation, db: store.db, functionsRepo, instances, blobs, signer, log, now,
      stageHere: placement === true ? ({ clusterId, ...request }) => agentHub.stage(clusterId, request) : undefined,
      stagingPaths: (assetIds) => assets.stagingPaths(assetIds), replicasKey: () => sealed('replicas.signing_key'),
    });
    closers.add(() => invocationPlane.close());
    const { invocation, resolver, largeResults, links } = invocationPlane;
    const health = createHealthService([{ name: 'db_client', probe: () => store.ping() }, eventLoop, ...autoscaler.health, ...invocationPlane.health]);
    metrics.watchHealth(() => health.report());
    metrics.watchLoad(() => invocation.load());
    const taskPlane = createTasksPlane({
      db: store.db, box, accounts, clusters, log, now, dataDir: config.store.dataDir, registry, settings: config.tasks,
      capacityInUse: { of: instances.instancesOn }, checkTelemetries: telemetries.checkReferences,
      onOutput: (taskId, instanceId, lines) => telemetryExport?.exportLogLines(taskId, lines.map((text) => ({ text, instanceId }))),
    });
    instances.countTasks(taskPlane.scheduler.tasksOn);
    const agentHub = createAgentHub({ clusters, instances, log, tasks: taskPlane.scheduler, epoch: () => election?.lastEpoch });
    // Agents link to the replica that runs placement: only it can ask them for logs; the others ask it.
    const logRelay = placement === true ? agentHub.logs : links && relayLogAsks(links.logs);
    const logs = createLogsService({ functions, tasks: taskPlane.service, clusters, now, ...(logRelay ? { relay: logRelay } : {}) });
    const logFeed = exportInstanceLogs({ telemetryExport, functionsRepo, logs, hub: agentHub, instances, now, log });
    const { turn, broker: streaming, listing: sessionListing } = await createStreamingPlane({
      settings: config.streaming, db: store.db, verifier, functionsRepo, functions, instances, placesHere: placement === true, links, log, now,
      turn: { ...config.turn, secret: config.turn.secret ?? await sealed('turn.secret'), runDir: path.join(config.store.dataDir, 'run') },
    });
    closers.add(() => turn.close());
    metrics.watchLoad(() => streaming.load());
    const stats = createStatsPlane({
      db: store.db, functionsRepo, settings: config.stats, log, now,
      *loads() {
        yield* invocation.load();
        yield* streaming.load();
      },
    });
    stats.recorder.start();
    closers.add(() => stats.recorder.stop());
    // STREAMING functions scale on sessions: spare instances follow each start and end at once.
    streaming.onChange(() => autoscaler.nudge());

    const observeInvocation: InvocationObserver = (ref, status, seconds, requestId) => {
      metrics.observeInvocation(ref, status, seconds);
      stats.recorder.observe(ref, status, seconds);
      telemetryExport?.recordInvocation(ref, requestId, status, seconds);
    };
    const invocationOptions = {
      limits: {
        defaultSeconds: config.invocation.pollSeconds, sseDefaultSeconds: config.invocation.ssePollSeconds,
        maxSeconds: config.invocation.maxPollSeconds, maxRequestBytes: config.invocation.maxRequestBytes,
      },
      log, observe: observeInvocation, checkAssets: assets.check, largeResults, admit: invocationPlane.admit,
    };
    const apiRoutes = withOpenApi([
      // The hot path first: Express tries routes in order.
      ...invocationRoutes(invocation, resolver, invocationOptions),
      ...healthRoutes(health),
      metricsRoute(metrics, { token: config.metrics.token ?? generatedMetricsToken }),
      whoamiRoute(),
      ...accountRoutes(accounts, config.api.accountBootstrap.limits),
      ...functionRoutes(functions),
      ...deploymentRoutes(deployments),
      ...registryRoutes(registry),
      ...telemetryRoutes(telemetries),
      ...assetRoutes(assets),
      ...clusterRoutes(clusters),
      ...stats.routes,
      ...taskPlane.routes,
      ...logRoutes(logs),
      ...sessionRoutes(sessionListing),
      ...autoscaler.routes,
    ], { title: 'svc platform API', version: VERSION, description: 'Functions, deployments, invocation, tasks, accounts' });

    const appOptions = { verifier, log, bodyLimit: config.gateway.bodyLimit, metrics };
    // The reference's streaming sign-in (X-SVC-ABSORB: true) lives on any path of the api host; the replica
    // running placement brokers sessions, the others hand sign-ins (and session sockets: gateway/plane.ts) to it.
    const sessionsElsewhere = () => placementRole.sessionsElsewhere();
    const api = createApp({
      ...appOptions, routes: apiRoutes, host: 'api', handlers: [forwarding(isSignIn, sessionsElsewhere), signInHandler(streaming)], handled: isSignIn,
    });
    const hostRouted = hostRoutedRoute(invocation, invocationOptions);
    await invocation.recover();
    const placementRole = await startPlacement({
      config, log, clusters, instances, tasks: taskPlane, hub: agentHub, sessionsOf: streaming.sessionsOf, broker: streaming, election, links, beside: () => logFeed?.start() ?? (() => {}),
      gatewayCa: config.gateway.tlsCert && readFileSync(config.gateway.tlsCert, 'utf8'),
    });
    const gateway = createGatewayPlane({
      settings: config.gateway, version: VERSION, appOptions, api, keyRoutes: keyServiceRoutes, hostRouted, broker: streaming, placement: placementRole,
    });
    // Placement stops first: an elected holder hands its lease over before the gateway drains.
    closers.add(() => gateway.close(), () => streaming.close(), () => autoscaler.stop(), () => placementRole.close());
    autoscaler.start();
    const port = await gateway.listen(config.gateway.port, config.gateway.host).catch((error: NodeJS.ErrnoException) => {
      throw error.code === 'EADDRINUSE' ? portInUse('the gateway', `${config.gateway.host}:${config.gateway.port}`, 'gateway.host, gateway.port: SVC_HOST, SVC_PORT') : error;
    });
    const scheme = config.gateway.tlsCert ? 'https' : 'http';
    log.info({ port, address: config.gateway.address, store: store.dialect }, 'gateway listening');
    placementRole.listening(config.gateway.replicaUrl ?? replicaUrlOf(scheme, config.gateway.host, port));
    const worker = localCluster && config.compute.inProcessAgent && placement === true
      ? await startLocalWorker(config, { scheme, port, apiHost: `${gateway.hosts.api}:${port}`, credential: localCluster.agentCredential }, log)
      : undefined;
    if (worker) closers.add(() => worker.close());

    const localGpu = config.compute.localCluster.gpus[0];
    const { samples, streamingDemo } = options.samples && localCluster && localGpu ? await deploySamples({
      ncaId: account.ncaId, functions, functionsRepo, deployments, keys, serviceId: config.keys.serviceId, now,
      gpu: { name: localGpu.name, instanceType: (localGpu.instanceTypes.find((type) => type.default) ?? localGpu.instanceTypes[0]).name },
    }) : { samples: [], streamingDemo: undefined };

    return {
      url: `${scheme}://localhost:${port}`,
      samples,
      streamingDemo,
      turn: turn.kind,
      isolation: worker?.isolation,
      port,
      hosts: gateway.hosts,
      bootstrapSecret: bootstrap.unused,
      bootstrapExpiresAt: bootstrap.expiresAt,
      metricsToken: generatedMetricsToken,
      adminSigningKeyFile,
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
