// The agent's end of the agent link (protocol.ts): one WebSocket to <server>/v1/agents/link on the api
// host, bearer = the cluster's agent credential. On every (re)connect the agent says `hello` with its
// GPUs and the current report of every instance it holds; the control plane answers with the whole
// desired set, so a reconnect (or a restart of the control plane) resyncs without duplicates: running
// instances keep running and keep their ids. While disconnected, instance and progress messages are
// dropped (hello carries the current state). Reconnects back off from 250 ms to 5 s, forever, until
// close(). A ping every pingIntervalMs; no pong by the next one means a dead link, which is dropped.
// Tasks ride the same link: hello carries the task runner's reports, `tasks` messages its desired set,
// and each task report goes up as a `task` message. `logs` requests are answered from the instances' kept
// output (output-logs.ts), followed until `logs-stop` or the link's end.
// Hello names this agent's node (agents sharing a cluster credential are each a node) and the lease it
// held; a welcome granting another lease (a newer generation: the old one lapsed, and the control plane
// has placed this node's instances elsewhere) makes the agent stop every instance it still runs before
// it takes the new desired set (fencing).
// Placement's term: a message carrying an `epoch` older than the newest one seen is refused (a replica
// whose elected placement was taken over). Several server URLs (comma-separated) are tried in turn, one
// per connect: any API replica serves agent links.
import { WebSocket, type ClientOptions, type RawData } from 'ws';
import type { Logger } from '../logger.ts';
import type { Agent } from './agent.ts';
import type { KeptResult, ResultKeeper } from './keeper.ts';
import { serveLogs, type OutputLogs } from './output-logs.ts';
import type { TaskRunner } from './task-runner.ts';
import { backoffDelay, type BackoffSettings } from './backoff.ts';
import {
  AGENT_LINK_PATH, controlMessageSchema, decodeMessage, type AgentMessage, type ControlMessage, type GpuOffer, type InstanceReport, type LeaseHeld, type StageRequest,
} from './protocol.ts';

export interface AgentLinkOptions {
  /** Base URL of the platform, e.g. http://127.0.0.1:8080 or https://gateway.example:443; several, comma-separated. */
  server: string;
  /** The cluster's agent credential. */
  credential: string;
  /** Host header, api.<gateway address>; also the TLS server name. Default: the server URL's host. */
  apiHost?: string;
  /** Extra CA (PEM) to trust for a TLS server. */
  ca?: string | Buffer;
  agent: Agent;
  /** The agent's task runner, when it runs tasks. */
  tasks?: TaskRunner;
  gpus: GpuOffer[];
  agentVersion: string;
  log: Logger;
  reconnect?: Partial<BackoffSettings>;
  pingIntervalMs?: number;
  /** Puts a request's input assets in place (compute/assets.ts); without it `stage` is answered with an error. */
  stage?(request: StageRequest): Promise<void>;
  /** Called on each `welcome` (the control plane accepted this agent). */
  onWelcome?(welcome: Extract<ControlMessage, { type: 'welcome' }>): void;
  /** Why instances here run without isolation (said in hello), when they do. */
  unisolated?: string;
  /** This agent's node name within its cluster (said in hello); the control plane's default when absent. */
  node?: string;
  /** The instances' kept output, for `logs` requests; without it they are answered with no lines. */
  outputs?: OutputLogs;
  /** This node's result keeper and the origin it listens at (said in every instance's endpoint). */
  keeper?: { keeper: ResultKeeper; origin: string };
}

export interface AgentLink {
  readonly connected: boolean;
  /** The server URL of the current (or next) link. */
  readonly server: string;
  /** Closes the link and stops reconnecting. Instances keep running (stop the agent for that). */
  close(): Promise<void>;
}

export function connectAgentLink(options: AgentLinkOptions): AgentLink {
  const reconnect: BackoffSettings = { initialMs: 250, maxMs: 5000, ...options.reconnect };
  const pingIntervalMs = options.pingIntervalMs ?? 15_000;
  const servers = options.server.split(',').map((server) => server.trim()).filter(Boolean);
  let turn = 0;
  let log = options.log;
  let socket: WebSocket | undefined;
  let open = false;
  let closed = false;
  let attempt = 0;
  let retryTimer: NodeJS.Timeout | undefined;
  /** The lease the last welcome granted: said in the next hello, compared with the next welcome's. */
  let lease: LeaseHeld | undefined;
  /** The newest placement term a message carried. */
  let epoch: number | undefined;

  /** False when there is no open link to carry it. */
  const send = (message: AgentMessage): boolean => {
    if (!open || socket?.readyState !== WebSocket.OPEN) return false;
    socket.send(JSON.stringify(message));
    return true;
  };
  const keeper = options.keeper;
  /** Replicas reach a running instance through this node's keeper. */
  const withKeeper = (report: InstanceReport): InstanceReport => (keeper && report.endpoint ? { ...report, endpoint: { ...report.endpoint, keeper: keeper.origin } } : report);
  const unsubscribeReports = options.agent.onReport((report) => send({ type: 'instance', report: withKeeper(report) }));
  const unsubscribeProgress = options.agent.onProgress((progress) => send({ type: 'progress', progress }));
  const unsubscribeTasks = options.tasks?.onReport((report) => send({ type: 'task', report }));
  const followed = logStreams(options.outputs, send);

  function connect(): void {
    const url = new URL(AGENT_LINK_PATH, servers[turn % servers.length].replace(/^http/, 'ws'));
    log = options.log.child({ link: url.origin });
    const headers: Record<string, string> = { authorization: `Bearer ${options.credential}` };
    if (options.apiHost) headers.host = options.apiHost;
    // ws hands these to tls.connect too: the server name checked against the certificate is the api host.
    const clientOptions: ClientOptions & { servername?: string } = {
      headers, ca: options.ca, servername: options.apiHost?.replace(/:\d+$/, ''), handshakeTimeout: 10_000,
    };
    const ws = new WebSocket(url, clientOptions);
    socket = ws;
    let alive = true;
    let pingTimer: NodeJS.Timeout | undefined;

    ws.on('open', () => {
      open = true;
      log.info({ server: url.origin }, 'agent link connected');
      send({
        type: 'hello', agentVersion: options.agentVersion, runtime: options.agent.runtimeName, gpus: options.gpus,
        instances: options.agent.reports().map(withKeeper), ...(options.tasks ? { tasks: options.tasks.reports() } : {}),
        ...(keeper ? { keeping: keeper.keeper.keeping() } : {}),
        ...(options.unisolated ? { unisolated: options.unisolated } : {}),
        ...(options.node ? { node: options.node } : {}), ...(lease ? { lease } : {}),
      });
      pingTimer = setInterval(() => {
        if (!alive) return ws.terminate();
        alive = false;
        ws.ping();
      }, pingIntervalMs);
    });
    ws.on('pong', () => { alive = true; });
    ws.on('message', (data: RawData, isBinary: boolean) => {
      alive = true;
      if (!isBinary) receive(data.toString());
    });
    let refused = false;
    ws.on('unexpected-response', (_request, response) => {
      refused = true;
      log.warn({ status: response.statusCode }, 'agent link refused');
      response.resume();
      ws.terminate();
    });
    ws.on('error', (error) => {
      if (!refused) log.warn({ reason: error.message }, 'agent link error');
    });
    ws.on('close', () => {
      clearInterval(pingTimer);
      followed.stopAll();
      const wasOpen = open && socket === ws;
      if (socket === ws) {
        open = false;
        socket = undefined;
      }
      if (wasOpen) log.warn('agent link lost');
      if (!closed) {
        turn++;
        retryTimer = setTimeout(connect, backoffDelay(reconnect, attempt++));
      }
    });
  }

  const keeperLink = {
    orphaned: (requestId: string) => send({ type: 'orphaned', requestId }),
    kept: ({ requestId, answer, error }: KeptResult) =>
      send({ type: 'kept', requestId, error, answer: answer && { ...answer, body: answer.body.toString('base64') } }),
  };

  /** A lease other than the one held: what runs here belongs to a generation the control plane has replaced. */
  function fence(granted: LeaseHeld): void {
    const stale = lease !== undefined && (lease.nodeId !== granted.nodeId || lease.generation !== granted.generation);
    lease = { nodeId: granted.nodeId, generation: granted.generation };
    if (!stale) return;
    log.warn({ generation: granted.generation }, 'this node\'s lease lapsed while it was away: stopping the instances of the old generation');
    options.agent.applyDesired([]);
  }

  function receive(text: string): void {
    const decoded = decodeMessage(controlMessageSchema, text);
    if ('error' in decoded) return log.warn({ reason: decoded.error }, 'agent link: a message that does not decode was ignored');
    const message = decoded.message;
    if (message.epoch !== undefined) {
      if (epoch !== undefined && message.epoch < epoch) return log.warn({ type: message.type, epoch: message.epoch, newest: epoch }, 'agent link: a message of an older placement term was refused');
      epoch = message.epoch;
    }
    if (message.type === 'welcome') {
      attempt = 0; // accepted: after a later drop, back-off starts over
      log.info({ clusterId: message.clusterId, clusterName: message.clusterName, node: message.lease?.name, generation: message.lease?.generation }, 'agent link welcomed');
      if (message.lease) fence(message.lease);
      keeper?.keeper.linked(message.keeperKey, keeperLink);
      options.onWelcome?.(message);
    } else if (message.type === 'desired') {
      options.agent.applyDesired(message.instances);
    } else if (message.type === 'tasks') {
      if (options.tasks) options.tasks.applyDesired(message.desired, message.specs);
      else log.warn('agent link: tasks sent to an agent that runs none; ignored');
    } else if (message.type === 'logs' || message.type === 'logs-stop') {
      followed.answer(message);
    } else if (message.type === 'keep') {
      keeper?.keeper.verdict(message.requestId, message.keep);
    } else if (message.type === 'stage') {
      const staged = options.stage?.(message) ?? Promise.reject(new Error('this agent does not stage assets'));
      staged.then(() => send({ type: 'staged', requestId: message.requestId }), (error: Error) => {
        log.warn({ reqId: message.requestId, reason: error.message }, 'input assets could not be put in place');
        send({ type: 'staged', requestId: message.requestId, error: error.message });
      });
    }
  }

  connect();
  return {
    get connected() {
      return open;
    },
    get server() {
      return servers[turn % servers.length];
    },
    async close() {
      closed = true;
      clearTimeout(retryTimer);
      unsubscribeReports();
      unsubscribeProgress();
      unsubscribeTasks?.();
      const ws = socket;
      if (!ws || ws.readyState === WebSocket.CLOSED) return;
      await new Promise<void>((resolve) => {
        ws.once('close', () => resolve());
        ws.close(1000, 'agent stopping');
        setTimeout(() => ws.terminate(), 2000).unref();
      });
    },
  };
}

/** The `logs` requests this link follows, each until its `logs-stop` or the link's end. */
function logStreams(outputs: OutputLogs | undefined, send: (message: AgentMessage) => void) {
  const following = new Map<string, () => void>();
  return {
    answer(message: Extract<ControlMessage, { type: 'logs' | 'logs-stop' }>) {
      following.get(message.streamId)?.();
      following.delete(message.streamId);
      if (message.type === 'logs-stop') return;
      if (!outputs) return send({ type: 'log-lines', streamId: message.streamId, lines: [], caughtUp: true, done: true });
      const stop = serveLogs(outputs, message, send);
      if (message.follow) following.set(message.streamId, stop);
    },
    stopAll() {
      for (const stop of following.values()) stop();
      following.clear();
    },
  };
}
