// The invocation plane as main.ts composes it: the queue (in this process, or on NATS JetStream shared by
// the replicas, whose signed exchanges ride the same connection), the service with its dispatcher, stored
// results and large results, the rate limits, and what the plane follows of placement.
import type { Kysely } from 'kysely';
import type { Database } from '../store/schema.ts';
import type { Config } from '../config.ts';
import type { HealthComponent } from '../control/health/service.ts';
import type { InstancesService } from '../control/instances/service.ts';
import type { FunctionsRepo } from '../control/functions/repo.ts';
import type { PathSigner } from '../domain/signed-paths.ts';
import type { Logger } from '../logger.ts';
import { createRateLimits } from '../rate-limits/plane.ts';
import type { BlobStore } from '../store/blobs.ts';
import { Dispatcher } from './dispatcher.ts';
import { JetStreamQueue } from './jetstream-queue.ts';
import { KeptAnswers } from './kept-answers.ts';
import { LargeResults } from './large-results.ts';
import { LocalQueue } from './local-queue.ts';
import { createReplicaSigner, type ReplicaLinks, type ReplicaSigner } from './replica-signing.ts';
import { createInvocationsRepo } from './repo.ts';
import { createVersionResolver } from './resolver.ts';
import { DurableResults } from './results.ts';
import { InvocationService } from './service.ts';
import { relayStaging, type StageAsk } from './stage-relay.ts';

export interface InvocationPlaneParts {
  settings: Config['invocation'];
  db: Kysely<Database>;
  functionsRepo: FunctionsRepo;
  instances: InstancesService;
  blobs: BlobStore;
  signer: PathSigner;
  /** Where a request's input assets are put: the agents' holder stages them itself (placement here); the others ask it. */
  stageHere?: (ask: StageAsk) => Promise<void>;
  /** The files of a request's assets on the agent's host. */
  stagingPaths(assetIds: string[]): StageAsk['assets'];
  /** The key the replicas sign their exchanges with (kept sealed in the store); asked for only with NATS. */
  replicasKey(): Promise<string>;
  /** Whether a node's agent holds a live lease (the store's view, right on any replica). */
  nodeLive(nodeId: string): Promise<boolean>;
  log: Logger;
  now: () => Date;
}

export async function createInvocationPlane(parts: InvocationPlaneParts) {
  const { settings, instances, log, now } = parts;
  const { natsUrl, maxQueueDepth } = settings;
  // Every replica on this store has the key: what they tell each other over NATS is signed with it.
  const replicasKey = natsUrl ? await parts.replicasKey() : undefined;
  const replicaSigner = replicasKey !== undefined ? createReplicaSigner(replicasKey) : undefined;
  const queue = natsUrl && replicaSigner
    ? await JetStreamQueue.connect({ nats: { ...settings, natsUrl }, signer: replicaSigner, maxDepth: maxQueueDepth, log })
    : new LocalQueue({ maxDepth: maxQueueDepth });
  const links = queue instanceof JetStreamQueue && replicaSigner ? replicaLinksOf(queue, replicaSigner) : undefined;
  const stage = parts.stageHere ?? (links && relayStaging(links.stage));
  const largeResults = new LargeResults({ blobs: parts.blobs, signer: parts.signer, maxBytes: settings.maxLargeResultBytes, retentionSeconds: settings.resultRetentionSeconds });
  const resolver = createVersionResolver(parts.functionsRepo);
  const results = new DurableResults({ repo: createInvocationsRepo(parts.db), log, now });
  // Every replica on NATS can answer the agents' keepers (placement runs on any); this one sends through them unless told not to.
  const kept = queue instanceof JetStreamQueue && replicasKey !== undefined ? new KeptAnswers({
    results, replicasKey, log, completed: (requestId) => queue.completed(requestId),
    holdsVersionOn: (nodeId, versionId) => instances.holdsVersionOn(nodeId, versionId),
  }) : undefined;
  const dispatcher = new Dispatcher({ maxResultBytes: settings.maxResultBytes, keeper: settings.resultKeepers ? kept : undefined });
  const invocation: InvocationService = new InvocationService({
    queue, dispatcher,
    results, nodeLive: parts.nodeLive,
    resolver, demand: instances, log, now, largeResults,
    stageAssets: stage && ((request, instance) => stage({
      clusterId: instance.clusterId, requestId: request.id, instanceId: instance.instanceId, assets: parts.stagingPaths(request.request.assets ?? []),
    })),
    maxResultBytes: settings.maxResultBytes, resultRetentionMs: settings.resultRetentionSeconds * 1000,
  });
  const rateLimits = await createRateLimits({
    functionsRepo: parts.functionsRepo, log, now, shared: queue instanceof JetStreamQueue ? { nc: queue.connection, bucket: queue.names.bucket('rates') } : undefined,
  }).catch(async (error: unknown) => {
    await invocation.close();
    throw error;
  });
  if (queue instanceof JetStreamQueue) instances.countingRunning((versionId) => queue.running(versionId));
  instances.onReady((versionId, ready) => invocation.ready(versionId, ready));
  instances.onKnown((versionIds) => invocation.retain(versionIds));
  instances.onProgress((progress) => invocation.progress(progress));
  // A replica cut off from NATS cannot share slots or queues: readiness says so, and traffic goes to the others.
  const health: HealthComponent[] = queue instanceof JetStreamQueue ? [{ name: 'nats_client', probe: () => queue.connection.flush() }] : [];
  return {
    invocation, resolver, largeResults, links, health, kept,
    /** This process runs an agent (compute/worker.ts) whose keeper is at `origin`. */
    agentInProcess: (origin: string) => dispatcher.keeperInProcess(origin),
    admit: rateLimits.admit,
    async close() {
      await rateLimits.close();
      await invocation.close();
    },
  };
}

export type InvocationPlane = Awaited<ReturnType<typeof createInvocationPlane>>;

/** The replicas' signed NATS exchanges, each on its subject of the installation. */
function replicaLinksOf(queue: JetStreamQueue, signer: ReplicaSigner): ReplicaLinks {
  const link = (subject: string) => ({ nc: queue.connection, subject, signer });
  const { stage, logs, sessions, agents } = queue.names;
  return { replicaId: queue.replicaId, stage: link(stage), logs: link(logs), sessions: link(sessions), agents: link(agents) };
}
