// Who runs placement, and what comes with it: the rounds (control/instances), the task scheduler, the
// agents' links, and the answers to the other replicas' asks over NATS (staging, logs, sessions), plus the
// log feed. compute.placement true: this process, from start to end (one process, SQLite). false: another
// replica; this one refuses agent links. 'elected': whichever replica holds the placement lease
// (control/placement/lease.ts); every replica takes agent links and relays them to it (relay.ts), and
// asks it over NATS like any other replica.
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Subscription } from '@nats-io/transport-node';
import type { Config } from '../config.ts';
import type { AgentHub } from '../control/agents/hub.ts';
import { createAgentEdge, serveRelayedLinks } from '../control/agents/relay.ts';
import type { ClustersService } from '../control/clusters/service.ts';
import type { InstancesService } from '../control/instances/service.ts';
import { serveLogAsks } from '../control/logs/relay.ts';
import type { ElectionHandlers, PlacementElection } from '../control/placement/lease.ts';
import type { TasksPlane } from '../control/tasks/plane.ts';
import { Problem } from '../domain/problem.ts';
import type { ForwardTarget } from '../http/forward.ts';
import { rejectUpgrade } from '../http/upgrade.ts';
import type { ReplicaLink, ReplicaLinks } from '../invocation/replica-signing.ts';
import { serveStaging } from '../invocation/stage-relay.ts';
import type { Logger } from '../logger.ts';
import type { StreamingBroker } from '../streaming/broker.ts';
import type { StreamingSession } from '../streaming/sessions.ts';
import { serveSessionAsks } from '../streaming/sessions-relay.ts';


export interface PlacementParts {
  config: Config;
  log: Logger;
  clusters: ClustersService;
  instances: InstancesService;
  tasks: TasksPlane;
  hub: AgentHub;
  sessionsOf: (versionId: string) => StreamingSession[];
  /** The streaming session broker: while placement runs here it carries on the sessions the one before started. */
  broker: Pick<StreamingBroker, 'lead' | 'follow'>;
  /** With placement 'elected': the lease this replica competes for (its term fences the instance rows' writes: main.ts). */
  election?: PlacementElection;
  links?: ReplicaLinks;
  /** The gateway's certificate (PEM) when it serves TLS: what another replica's is checked against. */
  gatewayCa?: string;
  /** Starts what runs only beside placement (the log feed); its result is called when placement stops here. */
  beside(): () => void;
}

export interface PlacementRole {
  /** GET /v1/agents/link upgrades. */
  agentUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /** The gateway listens, reached by the other replicas at `address`: an elected replica starts competing for the lease. */
  listening(address: string): void;
  /** Streaming sessions are brokered where placement runs: the replica to hand them to, when another one does. */
  sessionsElsewhere(): ForwardTarget | undefined;
  close(): Promise<void>;
}

/** While placement runs here: the other replicas' asks that only it can answer. */
function serveAsks(parts: PlacementParts): Subscription[] {
  const { links, hub, log, sessionsOf } = parts;
  if (!links) return [];
  return [
    serveStaging(links.stage, ({ clusterId, ...request }) => hub.stage(clusterId, request), log),
    serveLogAsks(links.logs, hub.logs, log),
    serveSessionAsks(links.sessions, sessionsOf, log),
  ];
}

export async function startPlacement(parts: PlacementParts): Promise<PlacementRole> {
  const { placement } = parts.config.compute;
  if (placement === 'elected') return startElected(parts);
  if (placement) await parts.broker.lead();
  await parts.instances.start();
  await parts.tasks.start();
  const fixed = { listening: () => {}, sessionsElsewhere: () => undefined };
  if (!placement) {
    return {
      ...fixed,
      agentUpgrade: (req, socket) => rejectUpgrade(req, socket, new Problem('service-unavailable', 'This API replica does not run placement; link agents to the one that does')),
      close: async () => {
        await parts.tasks.stop();
        await parts.instances.stop();
      },
    };
  }
  const asks = serveAsks(parts);
  const stopBeside = parts.beside();
  return {
    ...fixed,
    agentUpgrade: (req, socket, head) => void parts.hub.upgrade(req, socket, head),
    async close() {
      for (const subscription of asks) subscription.unsubscribe();
      stopBeside();
      parts.hub.close();
      await parts.instances.stop();
      await parts.tasks.stop();
    },
  };
}

interface Term {
  /** Frames relayed to this term may have been lost: its relayed links end. */
  resync(): void;
  stop(): Promise<void>;
}

/**
 * This replica's placement term begins: the relayed links' subscription first (an edge may relay a link
 * the moment it sees the term; they wait for `ready`), then placement, the task scheduler, the asks only
 * the holder answers and what runs beside. The term can be stopped at any point of that.
 */
function beginTerm(parts: PlacementParts, links: ReplicaLinks, epoch: number, prompted: string): { term: Term; ready: Promise<void> } {
  const { instances, tasks, hub, log } = parts;
  const started = (async () => {
    // Before placement's first round reports the ready instances, which the sessions carried on hold.
    await parts.broker.lead();
    await instances.lead();
    await tasks.start();
  })();
  const relayed = serveRelayedLinks(links.agents, epoch, hub.serve, started, log);
  const prompts = links.agents.nc.subscribe(prompted, { callback: () => void instances.reconcile() });
  let asks: Subscription[] = [prompts];
  let stopBeside = () => {};
  const term: Term = {
    resync: () => relayed.resync(),
    async stop() {
      for (const subscription of asks) subscription.unsubscribe();
      relayed.close();
      stopBeside();
      await tasks.stop();
      await instances.follow();
      parts.broker.follow();
    },
  };
  const ready = started.then(() => {
    asks = [prompts, ...serveAsks(parts)];
    stopBeside = parts.beside();
  });
  return { term, ready };
}

async function startElected(parts: PlacementParts): Promise<PlacementRole> {
  const { log, links, election, instances, hub } = parts;
  if (!links || !election) throw new Error('placement elected needs NATS and the placement lease');
  await instances.start();
  const edge = createAgentEdge({ link: links.agents, replicaId: links.replicaId, clusters: parts.clusters, log });
  // A holder that stops says so on `released`: the others look at once instead of at their next tick. A
  // replica without the lease that would have run a round (a change made through it) says so on `prompt`.
  const released = `${links.agents.subject}.released`;
  const prompted = `${links.agents.subject}.prompt`;
  let term: Term | undefined;
  let holder: { epoch: number; address: string } | undefined;
  const handlers: ElectionHandlers = {
    onSeen(seen) {
      holder = seen;
      edge.holder(seen?.epoch);
    },
    async onHeld(epoch) {
      const begun = beginTerm(parts, links, epoch, prompted);
      term = begun.term;
      await begun.ready;
    },
    async onLost() {
      await term?.stop();
      term = undefined;
    },
  };
  resyncAfterReconnects(links.agents, () => {
    edge.resync();
    term?.resync();
  }).catch((error) => log.warn({ err: error }, 'no longer told of NATS reconnects: relayed agent links are not resynced after one'));
  const nudges = links.agents.nc.subscribe(released, { callback: () => election.lookNow() });
  instances.promptingElsewhere(() => links.agents.nc.publish(prompted, ''));
  return {
    agentUpgrade: (req, socket, head) => void edge.upgrade(req, socket, head),
    listening: (address) => election.start(handlers, address),
    sessionsElsewhere: () => (holder && election.epoch === undefined ? { url: new URL(holder.address), ca: parts.gatewayCa } : undefined),
    async close() {
      // The agents first: they link again through the other replicas and wait there for the next holder.
      edge.close();
      const held = election.epoch !== undefined;
      await election.stop();
      nudges.unsubscribe();
      if (held) links.agents.nc.publish(released, '');
      await instances.stop();
      hub.close();
    },
  };
}

/** Calls `resync` each time the NATS connection is made again (ends with the connection). */
async function resyncAfterReconnects(link: ReplicaLink, resync: () => void): Promise<void> {
  for await (const status of link.nc.status()) if (status.type === 'reconnect') resync();
}
