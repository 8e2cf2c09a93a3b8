// The task queue and its dispatch: tasks wait QUEUED until a cluster that offers their GPU and instance
// type has a linked node with room; then they are LAUNCHED onto that node (its agent is handed the task
// in its desired set, protocol.ts `tasks`), RUNNING once the agent has started them, and end as the
// agent reports. Status changes and their events are written by repo.transition, guarded by the status a
// change may come from, so a user's cancel and an agent's report never both win.
//
//   QUEUED ──placed──► LAUNCHED ──agent started it──► RUNNING ──► COMPLETED | ERRORED | EXCEEDED_MAX_RUNTIME_DURATION
//     │                   └───────────────── start failed ─────────► ERRORED
//     └── still queued after maxQueuedDuration ──► EXCEEDED_MAX_QUEUED_DURATION
//   QUEUED | LAUNCHED | RUNNING ── cancel ──► CANCELED (the agent stops it: SIGTERM, kill after the grace period)
//
// Capacity, counted as placement counts it for function instances (instances/choose.ts): the cluster's
// (its leased nodes' sum, else its registration) minus what instances and tasks (dispatched or still
// stopping) hold there, and the node's (what its agent detected; unbounded when it says no count) minus
// what they hold on it. Of the clusters with room the least loaded is taken, then its node with the most
// room (chooseNode), so a cluster's tasks spread over its nodes.
// Nodes: a task stays with its node while the node's lease runs (a dropped link costs no task: its agent
// gets it again when it links again). When the lease lapses, the tasks the node held end ERRORED and are
// not run again (the node may still run them, cut off). An agent is sent only its node's tasks, so one
// that links holding others stops them (fencing); until they have ended they hold their GPUs there.
// Restarts: dispatched tasks are reloaded with their node; when a node's agent says hello, a task it no
// longer holds although it had acknowledged it is ERRORED (the agent restarted and lost it); one it never
// acknowledged is sent again. A node whose agent stays away longer than agentLostAfterMs has its
// dispatched tasks ERRORED (a backstop: its lease lapses long before).
import { randomUUID } from 'node:crypto';
import type { Resources, TaskReport, TaskSpec } from '../../compute/protocol.ts';
import { coalesce } from '../../coalesce.ts';
import { parseDuration } from '../../duration.ts';
import { withoutSecrets, type Logger } from '../../logger.ts';
import type { SecretBox } from '../../store/encryption.ts';
import type { NodeRow } from '../clusters/nodes.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import { resourcesOf } from '../clusters/resources.ts';
import type { ClustersService } from '../clusters/service.ts';
import { chooseNode, type NodeUse } from '../instances/choose.ts';
import type { PullAuth, RegistryService } from '../registry/service.ts';
import { documentOf, gpuSpecificationOf, secretsOf, type TaskRow, type TasksRepo } from './repo.ts';
import type { TaskDocument, TaskStatus } from './schema.ts';

/** The control plane's end of one agent link, for tasks. */
export interface TaskAgentChannel {
  sendTasks(desired: string[], specs: TaskSpec[]): void;
}

/** The clusters' nodes and what function instances hold on them: placement's (instances/service.ts). */
export interface TaskHosts {
  /** GPUs of this kind desired instances hold on the cluster. */
  instancesOn(clusterId: string, gpu: string): number;
  /** Desired instances on the node, of one GPU when given. */
  instancesOnNode(nodeId: string, gpu?: string): number;
  /** GPUs of this kind the cluster offers: its leased nodes' sum, else its registration. */
  capacity(cluster: ClusterRow, gpu: string): number;
  /** Nodes of the cluster whose agent is linked now, with what they offer. */
  linkedNodes(clusterId: string): NodeRow[];
}

export type RegistrySecrets = Pick<RegistryService, 'pullAuthFor'>;

export interface TaskSchedulerOptions {
  repo: TasksRepo;
  clusters: ClustersService;
  box: SecretBox;
  log: Logger;
  now?: () => Date;
  hosts: TaskHosts;
  registry?: RegistrySecrets;
  /** How often the queue is looked at even when nothing prompts it (queued-duration expiry). */
  intervalMs?: number;
  /** A node's agent away this long has its dispatched tasks ERRORED. */
  agentLostAfterMs?: number;
  /** Queued tasks looked at per pass. */
  batch?: number;
  /** Told of a task's last lines when it ends otherwise than COMPLETED (the telemetry export). */
  onOutput?: (taskId: string, instanceId: string, lines: string[]) => void;
}

/** A GPU a task holds: where. */
interface Held {
  clusterId: string;
  /** Null: launched before nodes; the first node of its cluster that links takes it. */
  nodeId: string | null;
  gpu: string;
}

interface Flight extends Held {
  taskId: string;
  ncaId: string;
  /** The spec as dispatched, secrets sealed until sent. */
  document: TaskDocument;
  instanceId: string;
  backend: string;
  sealedSecrets: string | null;
  revision: number;
  /** The agent has reported this task at least once. */
  acknowledged: boolean;
  registryAuth?: PullAuth;
  /** What the cluster's instance type grants the task. */
  resources?: Resources;
}

/** A node's agent link. */
interface AgentState {
  channel: TaskAgentChannel;
  /** taskId → revision sent on this link. */
  sent: Map<string, number>;
}

const DISPATCHED = ['LAUNCHED', 'RUNNING'] as const;
const AGENT_FINAL: Record<string, TaskStatus> = {
  COMPLETED: 'COMPLETED', ERRORED: 'ERRORED', EXCEEDED_MAX_RUNTIME_DURATION: 'EXCEEDED_MAX_RUNTIME_DURATION',
};
const LOG_TAIL_LINES = 20;
/** Reports of a task still holding its GPU. */
const LIVE = new Set(['STARTING', 'RUNNING']);

export const statusEvent = (from: string, to: string, error?: string) =>
  error ? `Changing status from '${from}' to '${to}' with error '${error}'` : `Changing status from '${from}' to '${to}'`;

export function createTaskScheduler(options: TaskSchedulerOptions) {
  const { repo, clusters, box, log, hosts } = options;
  const now = options.now ?? (() => new Date());
  const agentLostAfterMs = options.agentLostAfterMs ?? 300_000;
  const flights = new Map<string, Flight>();
  /** Canceled or deleted while dispatched, or fenced: the agent is stopping them; they still hold capacity. */
  const stopping = new Map<string, Held>();
  /** nodeId → its agent's link. */
  const agents = new Map<string, AgentState>();
  /** nodeId → when its link closed. */
  const awaySince = new Map<string | null, number>();
  /** One report at a time per task, in arrival order. */
  const chains = new Map<string, Promise<void>>();
  let timer: NodeJS.Timeout | undefined;
  let startedAt = 0;
  let lastExpiryScan = 0;

  function specOf(flight: Flight): TaskSpec {
    const doc = flight.document;
    const maxRuntimeMs = doc.maxRuntimeDuration ? parseDuration(doc.maxRuntimeDuration) : undefined;
    return {
      taskId: flight.taskId, instanceId: flight.instanceId, ncaId: flight.ncaId, name: doc.name,
      gpu: doc.gpuSpecification.gpu, instanceType: doc.gpuSpecification.instanceType, backend: flight.backend,
      containerImage: doc.containerImage ?? '', containerArgs: doc.containerArgs, containerEnvironment: doc.containerEnvironment ?? [],
      secrets: secretsOf(box, { id: flight.taskId, secrets: flight.sealedSecrets }),
      ...(maxRuntimeMs !== undefined ? { maxRuntimeMs } : {}),
      terminationGracePeriodMs: parseDuration(doc.terminationGracePeriodDuration) ?? 3_600_000,
      resultHandlingStrategy: doc.resultHandlingStrategy, revision: flight.revision,
      ...(flight.registryAuth ? { registryAuth: flight.registryAuth } : {}),
      ...(flight.resources ? { resources: flight.resources } : {}),
    };
  }

  async function flightOf(row: TaskRow): Promise<Flight> {
    const document = documentOf(row);
    const registryAuth = await options.registry?.pullAuthFor(row.nca_id, document.containerImage);
    const cluster = await clusters.findById(row.cluster_id!);
    const resources = cluster && resourcesOf(cluster.gpus, document.gpuSpecification.gpu, document.gpuSpecification.instanceType);
    return {
      taskId: row.id, ncaId: row.nca_id, clusterId: row.cluster_id!, nodeId: row.node_id, gpu: document.gpuSpecification.gpu, document,
      instanceId: row.instance_id!, backend: row.backend ?? '', sealedSecrets: row.secrets, revision: row.secrets_revision,
      acknowledged: row.instance_state !== null,
      ...(registryAuth ? { registryAuth } : {}),
      ...(resources ? { resources } : {}),
    };
  }

  /** Sends a node's agent its desired set: every id of its tasks, and the specs this link has not had yet. */
  function push(nodeId: string | null): void {
    const agent = nodeId === null ? undefined : agents.get(nodeId);
    if (!agent) return;
    const desired: string[] = [];
    const specs: TaskSpec[] = [];
    for (const flight of flights.values()) {
      if (flight.nodeId !== nodeId) continue;
      desired.push(flight.taskId);
      if (agent.sent.get(flight.taskId) !== flight.revision) {
        specs.push(specOf(flight));
        agent.sent.set(flight.taskId, flight.revision);
      }
    }
    const wanted = new Set(desired);
    for (const id of agent.sent.keys()) if (!wanted.has(id)) agent.sent.delete(id);
    agent.channel.sendTasks(desired, specs);
  }

  /** GPUs that tasks (dispatched or still stopping) hold where `at` says. */
  function countHeld(at: (held: Held) => boolean): number {
    let count = 0;
    for (const flight of flights.values()) if (at(flight)) count++;
    for (const stop of stopping.values()) if (at(stop)) count++;
    return count;
  }

  const tasksOn = (clusterId: string, gpu: string) => countHeld((held) => held.clusterId === clusterId && held.gpu === gpu);
  const tasksOnNode = (nodeId: string, gpu?: string) => countHeld((held) => held.nodeId === nodeId && (gpu === undefined || held.gpu === gpu));
  const held = (clusterId: string, gpu: string) => hosts.instancesOn(clusterId, gpu) + tasksOn(clusterId, gpu);

  /** The nodes a task may go to (their agent's link is open here) and what instances and tasks hold on them. */
  const nodeUse: NodeUse = {
    linked: (clusterId) => hosts.linkedNodes(clusterId).filter((node) => agents.has(node.id)),
    countOn: (nodeId, gpu) => hosts.instancesOnNode(nodeId, gpu) + tasksOnNode(nodeId, gpu),
  };

  /** The node of the cluster one more task of `gpu` goes to now; null when the cluster or every linked node of it is full. */
  function nodeFor(cluster: ClusterRow, gpu: string): string | null {
    if (hosts.capacity(cluster, gpu) - held(cluster.id, gpu) <= 0) return null;
    return chooseNode(cluster.id, gpu, nodeUse);
  }

  /** Where one more task of `gpu` goes: the least loaded of the clusters with room, onto its node with the most. */
  function targetOf(offering: ClusterRow[], gpu: string): { cluster: ClusterRow; nodeId: string } | undefined {
    const load = (cluster: ClusterRow) => held(cluster.id, gpu);
    for (const cluster of [...offering].sort((a, b) => load(a) - load(b))) {
      const nodeId = nodeFor(cluster, gpu);
      if (nodeId) return { cluster, nodeId };
    }
    return undefined;
  }

  /** Redacts the task's secret values from text that came from the task (its log lines). */
  function redact(lines: string[], row: TaskRow): string[] {
    return withoutSecrets(lines, secretsOf(box, row));
  }

  async function end(flight: Flight, from: readonly string[], status: TaskStatus, error: string | undefined, extra: Partial<TaskRow> = {}, logTail?: string[]) {
    const row = await repo.findById(flight.taskId);
    if (!row) return;
    const events = [statusEvent(row.status, status, error)];
    if (logTail?.length) events.push(`Last lines of output:\n${redact(logTail.slice(-LOG_TAIL_LINES), row).join('\n')}`);
    const at = now().toISOString();
    const changed = await repo.transition(flight.taskId, from, { status, updated_at: at, error: error ?? null, ...extra }, events);
    if (changed) log.info({ taskId: flight.taskId, from: row.status, to: status, reason: error }, 'task status');
    if (changed && logTail?.length) options.onOutput?.(flight.taskId, flight.instanceId, logTail);
  }

  async function passOnce(): Promise<void> {
    const at = now();
    const touched = new Set<string>();

    // Agents gone too long: their tasks cannot be followed any more.
    for (const flight of [...flights.values()]) {
      const since = flight.nodeId !== null && agents.has(flight.nodeId) ? undefined : awaySince.get(flight.nodeId) ?? startedAt;
      if (since === undefined || at.getTime() - since < agentLostAfterMs) continue;
      flights.delete(flight.taskId);
      await end(flight, DISPATCHED, 'ERRORED', `the agent of its node has not been connected for ${Math.round(agentLostAfterMs / 1000)} s`);
    }

    // Reading the queue is the costly part of a pass: do it when some node has room, and otherwise only
    // once per interval, for the queued-duration expiry.
    const linked = (cluster: ClusterRow) => nodeUse.linked(cluster.id).length > 0;
    const connected = (await clusters.all()).filter(linked);
    const hasRoom = () => connected.some((cluster) => cluster.gpus.some((gpu) => nodeFor(cluster, gpu.name) !== null));
    const expiryDue = at.getTime() - lastExpiryScan >= (options.intervalMs ?? 1000);
    if (!expiryDue && !hasRoom()) return;
    if (expiryDue) lastExpiryScan = at.getTime();
    const queued = await repo.listQueued(options.batch ?? 1000);
    const offerings = new Map<string, ClusterRow[]>();
    /** Specifications that found no room this pass: their later tasks wait too (a GPU freed meanwhile prompts another pass). */
    const full = new Set<string>();
    for (const row of queued) {
      if (!expiryDue && !hasRoom()) break;
      const document = documentOf(row);
      const queuedFor = at.getTime() - Date.parse(row.created_at);
      const maxQueued = parseDuration(document.maxQueuedDuration) ?? Number.POSITIVE_INFINITY;
      if (queuedFor > maxQueued) {
        const error = `not scheduled within maxQueuedDuration ${document.maxQueuedDuration}`;
        await repo.transition(row.id, ['QUEUED'], { status: 'EXCEEDED_MAX_QUEUED_DURATION', error, updated_at: at.toISOString() },
          [statusEvent('QUEUED', 'EXCEEDED_MAX_QUEUED_DURATION', error)]);
        continue;
      }
      const spec = document.gpuSpecification;
      const key = JSON.stringify([row.nca_id, spec.gpu, spec.instanceType, spec.backend, spec.clusters]);
      if (full.has(key)) continue;
      let offering = offerings.get(key);
      if (!offering) {
        offering = (await clusters.offering(row.nca_id, spec)).filter(linked);
        offerings.set(key, offering);
      }
      const target = targetOf(offering, spec.gpu);
      if (!target) {
        full.add(key);
        continue;
      }
      const { cluster, nodeId } = target;
      const launchedAt = at.toISOString();
      const placed = await repo.transition(row.id, ['QUEUED'], {
        status: 'LAUNCHED', cluster_id: cluster.id, node_id: nodeId, backend: cluster.group_name, location: cluster.name, instance_id: randomUUID(),
        instance_state: null, instance_created_at: launchedAt, launched_at: launchedAt, updated_at: launchedAt,
      }, [statusEvent('QUEUED', 'LAUNCHED')]);
      if (!placed) continue; // canceled meanwhile
      flights.set(row.id, await flightOf(placed));
      touched.add(nodeId);
    }
    for (const nodeId of touched) push(nodeId);
  }

  /** Runs a pass now, or right after the one in progress; never two at once. */
  const schedule = coalesce(passOnce, (error) => log.error({ err: error }, 'task scheduling failed; retrying on the next round'));

  function serially(taskId: string, work: () => Promise<void>): Promise<void> {
    const next = (chains.get(taskId) ?? Promise.resolve()).then(work).catch((error: unknown) => {
      log.error({ err: error, taskId }, 'task report failed');
    });
    chains.set(taskId, next);
    void next.finally(() => {
      if (chains.get(taskId) === next) chains.delete(taskId);
    });
    return next;
  }

  /** Folds one report of a node's agent into its task. */
  async function apply(nodeId: string, report: TaskReport): Promise<void> {
    const flight = flights.get(report.taskId);
    if (!flight || flight.nodeId !== nodeId || flight.instanceId !== report.instanceId) {
      // A task this plane stopped wanting there: the agent is stopping it, or has.
      const stop = stopping.get(report.taskId);
      if (stop?.nodeId === nodeId && !LIVE.has(report.state)) {
        stopping.delete(report.taskId);
        await repo.update(report.taskId, { instance_state: report.state, updated_at: now().toISOString() });
        void schedule();
      }
      return;
    }
    const at = now().toISOString();
    const first = !flight.acknowledged;
    flight.acknowledged = true;
    const progress: Partial<TaskRow> = {
      ...(report.percentComplete !== undefined ? { percent_complete: report.percentComplete } : {}),
      ...(report.lastHeartbeatAt !== undefined ? { last_heartbeat_at: report.lastHeartbeatAt } : {}),
    };

    if (report.state === 'STARTING') {
      if (first) await repo.update(flight.taskId, { instance_state: 'STARTING', updated_at: at });
      return;
    }
    if (report.state === 'RUNNING') {
      const moved = await repo.transition(flight.taskId, ['LAUNCHED'], { status: 'RUNNING', instance_state: 'RUNNING', updated_at: at, ...progress },
        [statusEvent('LAUNCHED', 'RUNNING')]);
      if (!moved && Object.keys(progress).length) await repo.update(flight.taskId, { ...progress, instance_state: 'RUNNING', updated_at: at });
      return;
    }

    // The task ended on the agent.
    flights.delete(flight.taskId);
    const status = AGENT_FINAL[report.state] ?? 'ERRORED';
    const error = status === 'COMPLETED' ? undefined
      : report.state === 'STOPPED' ? 'stopped by its agent (the agent is shutting down)' : report.message ?? `ended ${report.state}`;
    await end(flight, DISPATCHED, status, error, { instance_state: report.state, ...progress }, status === 'COMPLETED' ? undefined : report.logTail);
    push(nodeId);
    void schedule();
  }

  /** Tasks launched before nodes (no node_id) go to the first node of their cluster that links. */
  async function claimUnplaced(clusterId: string, nodeId: string): Promise<void> {
    for (const flight of flights.values()) {
      if (flight.clusterId !== clusterId || flight.nodeId !== null) continue;
      flight.nodeId = nodeId;
      await repo.update(flight.taskId, { node_id: nodeId });
    }
  }

  /** Tasks a linking agent still runs that are not its node's (any more): it stops them; until then they hold GPUs there. */
  async function holdFenced(clusterId: string, nodeId: string, reports: TaskReport[]): Promise<void> {
    for (const report of reports) {
      if (flights.has(report.taskId) || stopping.has(report.taskId) || !LIVE.has(report.state)) continue;
      const row = await repo.findById(report.taskId);
      if (row) stopping.set(report.taskId, { clusterId, nodeId, gpu: gpuSpecificationOf(row).gpu });
    }
  }

  return {
    schedule,

    async start() {
      startedAt = now().getTime();
      for (const row of await repo.listDispatched()) {
        if (row.cluster_id && row.instance_id) flights.set(row.id, await flightOf(row));
      }
      await schedule();
      timer = setInterval(() => void schedule(), options.intervalMs ?? 1000);
      timer.unref();
    },

    async stop() {
      clearInterval(timer);
      await schedule.settled();
      await Promise.all([...chains.values()]);
    },

    /** A node's agent said hello with the tasks it holds; a newer link of the node replaces the older one. */
    async agentConnected(nodeId: string, cluster: ClusterRow, channel: TaskAgentChannel, reports: TaskReport[]) {
      agents.set(nodeId, { channel, sent: new Map() });
      awaySince.delete(nodeId);
      await claimUnplaced(cluster.id, nodeId);
      const held = new Map(reports.map((report) => [report.taskId, report]));
      for (const report of reports) await serially(report.taskId, () => apply(nodeId, report));
      for (const flight of [...flights.values()]) {
        if (flight.nodeId !== nodeId || held.has(flight.taskId)) continue;
        if (!flight.acknowledged) continue; // never reached the agent: it is sent (again) below
        flights.delete(flight.taskId);
        await serially(flight.taskId, () => end(flight, DISPATCHED, 'ERRORED',
          `the agent of cluster '${cluster.name}' no longer runs this task (the agent restarted)`, { instance_state: 'STOPPED' }));
      }
      for (const [taskId, stop] of [...stopping]) {
        if (stop.nodeId === nodeId && !held.has(taskId)) stopping.delete(taskId);
      }
      await holdFenced(cluster.id, nodeId, reports);
      push(nodeId);
      await schedule();
    },

    agentDisconnected(nodeId: string, channel: TaskAgentChannel) {
      if (agents.get(nodeId)?.channel !== channel) return;
      agents.delete(nodeId);
      awaySince.set(nodeId, now().getTime());
    },

    /**
     * A node's lease lapsed: the tasks it held end ERRORED and are not run again (its agent may still run
     * them, cut off; when it links again it is told to stop them). Its GPUs no longer count.
     */
    async nodeLapsed(node: Pick<NodeRow, 'id' | 'name'>) {
      agents.delete(node.id);
      for (const [taskId, stop] of [...stopping]) if (stop.nodeId === node.id) stopping.delete(taskId);
      for (const flight of [...flights.values()]) {
        if (flight.nodeId !== node.id) continue;
        flights.delete(flight.taskId);
        await serially(flight.taskId, () => end(flight, DISPATCHED, 'ERRORED',
          `its node '${node.name}' lost its lease (the agent stopped answering); the task is not run again elsewhere`));
      }
      await schedule();
    },

    report(nodeId: string, report: TaskReport): Promise<void> {
      return serially(report.taskId, () => apply(nodeId, report));
    },

    /** The task left QUEUED/LAUNCHED/RUNNING by a user's hand (cancel, delete): its agent stops it. */
    withdraw(taskId: string): void {
      const flight = flights.get(taskId);
      if (!flight) return;
      flights.delete(taskId);
      stopping.set(taskId, { clusterId: flight.clusterId, nodeId: flight.nodeId, gpu: flight.gpu });
      push(flight.nodeId);
    },

    /** New secrets for a task: a dispatched one gets its spec again (the agent refreshes the secrets file). */
    secretsChanged(taskId: string, sealed: string, revision: number): void {
      const flight = flights.get(taskId);
      if (!flight) return;
      flight.sealedSecrets = sealed;
      flight.revision = revision;
      push(flight.nodeId);
    },

    /** GPUs of `gpu` that tasks hold on a cluster (dispatched or still stopping), for function placement. */
    tasksOn,

    /** Tasks on a node (dispatched or still stopping), of one GPU when given, for function placement. */
    tasksOnNode,

    /** Whether `clusterId` runs the task now (result uploads are taken only from there). */
    runsOn(taskId: string, clusterId: string): boolean {
      return flights.get(taskId)?.clusterId === clusterId;
    },
  };
}

export type TaskScheduler = ReturnType<typeof createTaskScheduler>;
