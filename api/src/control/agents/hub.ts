// The control plane's end of the agent link (compute/protocol.ts): authenticates a cluster's agent by
// its credential, hands it the desired set, and feeds its reports to placement. One link per cluster;
// a newer link replaces an older one. Tasks ride the same link: hello's task reports, `tasks` desired
// sets and `task` reports go to the task scheduler when one is given. Logs are asked of agents through
// `logs` (logs.ts: LogRelay).
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { agentMessageSchema, decodeMessage, type AgentMessage, type ControlMessage, type StageRequest, type TaskSpec } from '../../compute/protocol.ts';
import { bearerOf } from '../../http/auth.ts';
import { Problem, unauthorized } from '../../domain/problem.ts';
import { rejectUpgrade } from '../../http/upgrade.ts';
import type { Logger } from '../../logger.ts';
import type { ClustersService } from '../clusters/service.ts';
import type { AgentChannel, InstancesService } from '../instances/service.ts';
import type { TaskScheduler } from '../tasks/scheduler.ts';
import { LogRelay } from './logs.ts';
import { AssetStaging } from './staging.ts';

/** What the hub needs of the task plane. */
export type TaskAgents = Pick<TaskScheduler, 'agentConnected' | 'agentDisconnected' | 'report'>;

const HEARTBEAT_MS = 15_000;
const HELLO_TIMEOUT_MS = 10_000;

export function createAgentHub(clusters: ClustersService, instances: InstancesService, log: Logger, tasks?: TaskAgents) {
  const server = new WebSocketServer({ noServer: true, maxPayload: 16 * 1024 * 1024 });
  const staging = new AssetStaging();
  const logs = new LogRelay();

  function serve(ws: WebSocket, clusterId: string) {
    const send = (message: ControlMessage) => ws.readyState === ws.OPEN && ws.send(JSON.stringify(message));
    const channel: AgentChannel = { sendDesired: (desired) => send({ type: 'desired', instances: desired }) };
    const taskChannel = { sendTasks: (desired: string[], specs: TaskSpec[]) => send({ type: 'tasks', desired, specs }) };
    let alive = true;
    let greeted = false;
    const helloTimer = setTimeout(() => ws.close(4408, 'no hello'), HELLO_TIMEOUT_MS);
    const heartbeat = setInterval(() => {
      if (!alive) return ws.terminate();
      alive = false;
      ws.ping();
      if (greeted) void clusters.recordAgentContact(clusterId).catch(() => {});
    }, HEARTBEAT_MS);
    ws.on('pong', () => {
      alive = true;
    });

    ws.on('message', (data) => {
      const decoded = decodeMessage(agentMessageSchema, data.toString());
      if ('error' in decoded) return log.warn({ clusterId, reason: decoded.error }, 'agent sent a frame that does not decode; ignored');
      void handle(decoded.message).catch((error) => log.error({ clusterId, err: error }, 'agent message failed'));
    });

    async function handle(message: AgentMessage) {
      if (message.type === 'hello') {
        clearTimeout(helloTimer);
        greeted = true;
        const cluster = await clusters.findById(clusterId);
        if (!cluster) return ws.close(4404, 'cluster deregistered');
        send({ type: 'welcome', clusterId, clusterName: cluster.name, ncaId: cluster.nca_id });
        log.info({ clusterId, runtime: message.runtime, agentVersion: message.agentVersion, instances: message.instances.length }, 'agent connected');
        staging.linked(clusterId, send);
        logs.linked(clusterId, send);
        await instances.agentConnected(cluster, channel, { gpus: message.gpus, instances: message.instances, unisolated: message.unisolated });
        await tasks?.agentConnected(cluster, taskChannel, message.tasks ?? []);
      } else if (!greeted) {
        log.warn({ clusterId, type: message.type }, 'agent spoke before hello; ignored');
      } else if (message.type === 'instance') {
        await instances.report(clusterId, message.report);
      } else if (message.type === 'progress') {
        instances.progress(clusterId, message.progress);
      } else if (message.type === 'task') {
        await tasks?.report(clusterId, message.report);
      } else if (message.type === 'staged') {
        staging.staged(message.requestId, message.error);
      } else if (message.type === 'log-lines') {
        logs.received(clusterId, message);
      }
    }

    ws.on('close', () => {
      clearTimeout(helloTimer);
      clearInterval(heartbeat);
      instances.agentDisconnected(clusterId, channel);
      tasks?.agentDisconnected(clusterId, taskChannel);
      staging.unlinked(clusterId, send);
      logs.unlinked(clusterId, send);
      log.info({ clusterId }, 'agent disconnected');
    });
  }

  return {
    /** Puts a request's input assets in place on the instance's host (its cluster's agent fetches them). */
    stage: (clusterId: string, request: Omit<StageRequest, 'type'>) => staging.stage(clusterId, request),

    /** Instances' logs, from the agents that keep them. */
    logs,

    /** Handles GET /v1/agents/link upgrades: 401 problem before the upgrade unless the credential is a cluster's. */
    async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer) {
      try {
        const cluster = await clusters.authenticateAgent(bearerOf(req.headers.authorization) ?? '');
        if (!cluster) return rejectUpgrade(req, socket, unauthorized('An agent link needs its cluster\'s agent credential as bearer'));
        server.handleUpgrade(req, socket, head, (ws) => serve(ws, cluster.id));
      } catch (error) {
        // The store is out of reach (say, the database refuses connections): the agent retries later.
        log.warn({ err: error }, 'could not check an agent credential');
        rejectUpgrade(req, socket, new Problem('service-unavailable', 'The agent credential could not be checked now; try again', {
          headers: { 'retry-after': '5' },
        }));
      }
    },

    close() {
      for (const client of server.clients) client.terminate();
      server.close();
    },
  };
}

export type AgentHub = ReturnType<typeof createAgentHub>;
