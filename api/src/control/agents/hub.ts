// The control plane's end of the agent link (compute/protocol.ts): authenticates an agent by its
// cluster's credential, registers it as a node of that cluster (by the node name its hello says), hands
// it its node's desired set, and feeds its reports to placement. Agents sharing a credential are each a
// node; a newer link of the same node replaces an older one. Every answer over the link (a pong, any
// message) renews the node's lease; the hub pings a few times per lease and drops a link that stops
// answering. Tasks ride the same link, each on one node (task-nodes.ts): hello's task reports, each
// node's `tasks` desired set and its `task` reports go to the task scheduler when one is given. Logs are
// asked of the agents of a cluster's nodes through `logs` (logs.ts: LogRelay).
// A link is a LinkSocket: the agent's WebSocket itself, or (compute.placement 'elected') one that another
// replica accepted and relays over NATS (relay.ts). Every message to an agent carries placement's term
// (`epoch`) when it has one: the agent refuses one of a term older than it has seen.
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { agentMessageSchema, decodeMessage, type AgentMessage, type ControlMessage, type StageRequest, type TaskSpec } from '../../compute/protocol.ts';
import { bearerOf } from '../../http/auth.ts';
import { Problem, unauthorized } from '../../domain/problem.ts';
import { rejectUpgrade } from '../../http/upgrade.ts';
import type { Logger } from '../../logger.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import type { ClustersService } from '../clusters/service.ts';
import { NodeRefused } from '../instances/leases.ts';
import type { AgentChannel, InstancesService, NodeRef } from '../instances/service.ts';
import type { TaskScheduler } from '../tasks/scheduler.ts';
import { LogRelay } from './logs.ts';
import { AssetStaging } from './staging.ts';
import { TaskNodes, type TaskLink } from './task-nodes.ts';

/**
 * What the hub needs of the invocation plane for answers the agents' keepers hold after the API replica
 * sending them went away (compute/keeper.ts): only with several replicas.
 */
export interface KeptAnswers {
  /** The node's key for its keeper's tokens (said in the welcome). */
  keyFor(nodeId: string): string;
  /** Whether the request was answered 202 and is running (it becomes the node's to finish). */
  adopt(nodeId: string, requestId: string): Promise<boolean>;
  kept(nodeId: string, message: Extract<AgentMessage, { type: 'kept' }>): Promise<void>;
  /** The node's hello: the requests its keeper still holds; others it was to finish are lost. */
  linked(nodeId: string, keeping: string[]): Promise<void>;
}

/** What the hub needs of the task plane. */
export type TaskAgents = Pick<TaskScheduler, 'agentConnected' | 'agentDisconnected' | 'nodeLapsed' | 'report'>;

const HELLO_TIMEOUT_MS = 10_000;
/** Pings per lease period: a link that misses one answer is dropped, the lease still has two to go. */
const PINGS_PER_LEASE = 3;

/** One agent link as the hub uses it: a WebSocket, or one relayed from another replica (relay.ts). */
export interface LinkSocket {
  readonly open: boolean;
  send(text: string): void;
  ping(): void;
  close(code: number, reason: string): void;
  terminate(): void;
  on(event: 'message', listener: (text: string) => void): void;
  on(event: 'pong' | 'close', listener: () => void): void;
}

/** An agent's WebSocket, as a LinkSocket. */
export function webSocketLink(ws: WebSocket): LinkSocket {
  return {
    get open() {
      return ws.readyState === ws.OPEN;
    },
    send: (text) => ws.send(text),
    ping: () => ws.ping(),
    close: (code, reason) => ws.close(code, reason),
    terminate: () => ws.terminate(),
    on(event: 'message' | 'pong' | 'close', listener: (text: string) => void) {
      if (event === 'message') ws.on('message', (data) => listener(data.toString()));
      else ws.on(event, () => listener(''));
    },
  };
}

export interface AgentHubOptions {
  clusters: ClustersService;
  instances: InstancesService;
  log: Logger;
  tasks?: TaskAgents;
  /** Placement's term while this replica holds the elected lease: stamped on every message to an agent. */
  epoch?: () => number | undefined;
  kept?: KeptAnswers;
}

export function createAgentHub({ clusters, instances, log, tasks, epoch, kept }: AgentHubOptions) {
  const server = new WebSocketServer({ noServer: true, maxPayload: 16 * 1024 * 1024 });
  const staging = new AssetStaging();
  const taskNodes = tasks && new TaskNodes(tasks);
  instances.onNodeLapsed((node) => {
    void taskNodes?.lapsed(node).catch((error) => log.error({ clusterId: node.cluster_id, nodeId: node.id, err: error }, 'could not end the tasks of a lapsed node'));
  });
  const logs = new LogRelay();

  const sockets = new Set<LinkSocket>();

  function serve(ws: LinkSocket, clusterId: string) {
    sockets.add(ws);
    const send = (message: ControlMessage) => {
      const term = epoch?.();
      if (ws.open) ws.send(JSON.stringify(term === undefined ? message : { ...message, epoch: term }));
    };
    const channel: AgentChannel = {
      sendDesired: (desired) => send({ type: 'desired', instances: desired }),
      close: (reason) => ws.close(4410, reason),
    };
    let node: NodeRef | undefined;
    let taskLink: TaskLink | undefined;
    let alive = true;
    const helloTimer = setTimeout(() => ws.close(4408, 'no hello'), HELLO_TIMEOUT_MS);
    const heartbeat = setInterval(() => {
      if (!alive) return ws.terminate();
      alive = false;
      ws.ping();
    }, Math.max(50, Math.floor(instances.leaseMs / PINGS_PER_LEASE)));
    const answered = () => {
      alive = true;
      if (node) instances.renew(node.id);
    };
    ws.on('pong', answered);

    ws.on('message', (text) => {
      answered();
      const decoded = decodeMessage(agentMessageSchema, text);
      if ('error' in decoded) return log.warn({ clusterId, reason: decoded.error }, 'agent sent a frame that does not decode; ignored');
      void handle(decoded.message).catch((error) => log.error({ clusterId, err: error }, 'agent message failed'));
    });

    async function hello(message: Extract<AgentMessage, { type: 'hello' }>, cluster: ClusterRow) {
      node = await instances.agentConnected(cluster, channel, message, (lease) => {
        send({ type: 'welcome', clusterId, clusterName: cluster.name, ncaId: cluster.nca_id, lease, keeperKey: kept?.keyFor(lease.nodeId) });
      });
      if (!ws.open) return closed();
      log.info({ clusterId, nodeId: node.id, node: message.node, runtime: message.runtime, agentVersion: message.agentVersion, instances: message.instances.length }, 'agent connected');
      staging.linked(node.id, send);
      logs.linked(clusterId, node.id, send);
      taskLink = { nodeId: node.id, cluster, channel: { sendTasks: (desired: string[], specs: TaskSpec[]) => send({ type: 'tasks', desired, specs }) } };
      await taskNodes?.linked(taskLink, message.tasks ?? []);
      await kept?.linked(node.id, message.keeping ?? []);
    }

    /** The hello being handled: what the agent says meanwhile (a report of a change) waits for it, in order. */
    let greeting: Promise<void> | undefined;

    async function admit(message: Extract<AgentMessage, { type: 'hello' }>) {
      const cluster = await clusters.findById(clusterId);
      if (!cluster) return void ws.close(4404, 'cluster deregistered');
      await hello(message, cluster).catch((error) => {
        // Refused, or the store failed: either way the agent learns it from the close (and links again).
        if (error instanceof NodeRefused) log.warn({ clusterId, node: message.node, reason: error.message }, 'agent refused');
        else log.error({ clusterId, node: message.node, err: error }, 'agent hello failed; its link is closed');
        ws.close(error instanceof NodeRefused ? 4429 : 1011, error instanceof NodeRefused ? error.message.slice(0, 120) : 'hello failed');
      });
    }

    async function handle(message: AgentMessage) {
      if (message.type === 'hello') {
        clearTimeout(helloTimer);
        if (greeting) return log.warn({ clusterId }, 'agent said hello twice on one link; ignored');
        greeting = admit(message);
        return greeting;
      }
      await greeting;
      if (!node) {
        log.warn({ clusterId, type: message.type }, 'agent spoke before hello; ignored');
      } else if (message.type === 'instance') {
        await instances.report(node, message.report);
      } else if (message.type === 'progress') {
        instances.progress(clusterId, message.progress);
      } else if (message.type === 'task') {
        if (taskLink) await taskNodes?.reported(taskLink, message.report);
      } else if (message.type === 'staged') {
        staging.staged(message.requestId, message.error);
      } else if (message.type === 'log-lines') {
        logs.received(node.id, message);
      } else if (message.type === 'orphaned') {
        send({ type: 'keep', requestId: message.requestId, keep: await kept?.adopt(node.id, message.requestId) ?? false });
      } else if (message.type === 'kept') {
        await kept?.kept(node.id, message);
      }
    }

    let released = false;
    /** The link closed (also when it closed while hello was still being handled, once it has been). */
    function closed() {
      sockets.delete(ws);
      clearTimeout(helloTimer);
      clearInterval(heartbeat);
      if (!node || released) return;
      released = true;
      instances.agentDisconnected(node.id, channel);
      if (taskLink) taskNodes?.unlinked(taskLink);
      staging.unlinked(node.id, send);
      logs.unlinked(node.id, send);
      log.info({ clusterId, nodeId: node.id }, 'agent disconnected');
    }
    ws.on('close', closed);
  }

  return {
    /** Puts a request's input assets in place on the instance's host (the agent of its node fetches them). */
    stage: (_clusterId: string, request: Omit<StageRequest, 'type'>) => staging.stage(instances.nodeOf(request.instanceId), request),

    /** Instances' logs, from the agents that keep them. */
    logs,

    /** Handles GET /v1/agents/link upgrades: 401 problem before the upgrade unless the credential is a cluster's. */
    async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer) {
      try {
        const cluster = await clusters.authenticateAgent(bearerOf(req.headers.authorization) ?? '');
        if (!cluster) return rejectUpgrade(req, socket, unauthorized('An agent link needs its cluster\'s agent credential as bearer'));
        server.handleUpgrade(req, socket, head, (ws) => serve(webSocketLink(ws), cluster.id));
      } catch (error) {
        // The store is out of reach (say, the database refuses connections): the agent retries later.
        log.warn({ err: error }, 'could not check an agent credential');
        rejectUpgrade(req, socket, new Problem('service-unavailable', 'The agent credential could not be checked now; try again', {
          headers: { 'retry-after': '5' },
        }));
      }
    },

    /** Serves a link another replica accepted and relays (relay.ts). */
    serve,

    close() {
      for (const link of [...sockets]) link.terminate();
      server.close();
    },
  };
}

export type AgentHub = ReturnType<typeof createAgentHub>;
