// The task queue and its dispatch: tasks wait QUEUED until a cluster that offers their GPU and instance
// type has capacity and its agent is connected; then they are LAUNCHED onto it (the agent is handed the
// task in its desired set, protocol.ts `tasks`), RUNNING once the agent has started them, and end as the
// agent reports. Status changes and their events are written by repo.transition, guarded by the status a
// change may come from, so a user's cancel and an agent's report never both win.
//
//   QUEUED ──placed──► LAUNCHED ──agent started it──► RUNNING ──► COMPLETED | ERRORED | EXCEEDED_MAX_RUNTIME_DURATION
//     │                   └───────────────── start failed ─────────► ERRORED
//     └── still queued after maxQueuedDuration ──► EXCEEDED_MAX_QUEUED_DURATION
//   QUEUED | LAUNCHED | RUNNING ── cancel ──► CANCELED (the agent stops it: SIGTERM, kill after the grace period)
//
// Capacity: a cluster's GPU capacity (cluster registration; none = unbounded) minus the tasks it holds
// (dispatched or still stopping) minus what `capacityInUse` says function instances take.
// Restarts: dispatched tasks are reloaded; when a cluster's agent says hello, a task it no longer holds
// although it had acknowledged it is ERRORED (the agent restarted and lost it); one it never
// acknowledged is sent again. A cluster whose agent stays away longer than agentLostAfterMs has its
// dispatched tasks ERRORED.
import { randomUUID } from 'node:crypto';
import type { Resources, TaskReport, TaskSpec } from '../../compute/protocol.ts';
import { coalesce } from '../../coalesce.ts';
import { parseDuration } from '../../duration.ts';
import { withoutSecrets, type Logger } from '../../logger.ts';
import type { SecretBox } from '../../store/encryption.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import { resourcesOf } from '../clusters/resources.ts';
import type { ClustersService } from '../clusters/service.ts';
import type { PullAuth, RegistryService } from '../registry/service.ts';
import { documentOf, secretsOf, type TaskRow, type TasksRepo } from './repo.ts';
import type { TaskDocument, TaskStatus } from './schema.ts';

/** The control plane's end of one agent link, for tasks. */
export interface TaskAgentChannel {
  sendTasks(desired: string[], specs: TaskSpec[]): void;
}

/** GPUs of a cluster that function instances hold (from the instances service, when wired). */
export interface CapacityInUse {
  of(clusterId: string, gpu: string): number;
}

export type RegistrySecrets = Pick<RegistryService, 'pullAuthFor'>;

export interface TaskSchedulerOptions {
  repo: TasksRepo;
  clusters: ClustersService;
  box: SecretBox;
  log: Logger;
  now?: () => Date;
  capacityInUse?: CapacityInUse;
  registry?: RegistrySecrets;
  /** How often the queue is looked at even when nothing prompts it (queued-duration expiry). */
  intervalMs?: number;
  /** A cluster's agent away this long has its dispatched tasks ERRORED. */
  agentLostAfterMs?: number;
  /** Queued tasks looked at per pass. */
  batch?: number;
  /** Told of a task's last lines when it ends otherwise than COMPLETED (the telemetry export). */
  onOutput?: (taskId: string, instanceId: string, lines: string[]) => void;
}

interface Flight {
  taskId: string;
  ncaId: string;
  clusterId: string;
  gpu: string;
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

export const statusEvent = (from: string, to: string, error?: string) =>
  error ? `Changing status from '${from}' to '${to}' with error '${error}'` : `Changing status from '${from}' to '${to}'`;

export function createTaskScheduler(options: TaskSchedulerOptions) {
  const { repo, clusters, box, log } = options;
  const now = options.now ?? (() => new Date());
  const agentLostAfterMs = options.agentLostAfterMs ?? 300_000;
  const flights = new Map<string, Flight>();
  /** Canceled or deleted while dispatched: the agent is stopping them; they still hold capacity. */
  const stopping = new Map<string, { clusterId: string; gpu: string }>();
  const agents = new Map<string, AgentState>();
  const awaySince = new Map<string, number>();
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
      taskId: row.id, ncaId: row.nca_id, clusterId: row.cluster_id!, gpu: document.gpuSpecification.gpu, document,
      instanceId: row.instance_id!, backend: row.backend ?? '', sealedSecrets: row.secrets, revision: row.secrets_revision,
      acknowledged: row.instance_state !== null,
      ...(registryAuth ? { registryAuth } : {}),
      ...(resources ? { resources } : {}),
    };
  }

  /** Sends a cluster's agent its desired set: every id, and the specs this link has not had yet. */
  function push(clusterId: string): void {
    const agent = agents.get(clusterId);
    if (!agent) return;
    const desired: string[] = [];
    const specs: TaskSpec[] = [];
    for (const flight of flights.values()) {
      if (flight.clusterId !== clusterId) continue;
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

  function tasksOn(clusterId: string, gpu: string): number {
    let count = 0;
    for (const flight of flights.values()) if (flight.clusterId === clusterId && flight.gpu === gpu) count++;
    for (const stop of stopping.values()) if (stop.clusterId === clusterId && stop.gpu === gpu) count++;
    return count;
  }

  function held(clusterId: string, gpu: string): number {
    return (options.capacityInUse?.of(clusterId, gpu) ?? 0) + tasksOn(clusterId, gpu);
  }

  function capacityLeft(cluster: ClusterRow, gpu: string): number {
    const offered = cluster.gpus.find((candidate) => candidate.name === gpu);
    if (offered?.capacity === undefined) return Number.POSITIVE_INFINITY;
    return offered.capacity - held(cluster.id, gpu);
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
      const since = agents.has(flight.clusterId) ? undefined : awaySince.get(flight.clusterId) ?? startedAt;
      if (since === undefined || at.getTime() - since < agentLostAfterMs) continue;
      flights.delete(flight.taskId);
      await end(flight, DISPATCHED, 'ERRORED', `the agent of its cluster has not been connected for ${Math.round(agentLostAfterMs / 1000)} s`);
    }

    // Reading the queue is the costly part of a pass: do it when some connected cluster has room, and
    // otherwise only once per interval, for the queued-duration expiry.
    const connected = (await clusters.all()).filter((cluster) => agents.has(cluster.id));
    const hasRoom = () => connected.some((cluster) => cluster.gpus.some((gpu) => capacityLeft(cluster, gpu.name) > 0));
    const expiryDue = at.getTime() - lastExpiryScan >= (options.intervalMs ?? 1000);
    if (!expiryDue && !hasRoom()) return;
    if (expiryDue) lastExpiryScan = at.getTime();
    const queued = await repo.listQueued(options.batch ?? 1000);
    const offerings = new Map<string, ClusterRow[]>();
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
      let offering = offerings.get(key);
      if (!offering) {
        offering = (await clusters.offering(row.nca_id, spec)).filter((cluster) => agents.has(cluster.id));
        offerings.set(key, offering);
      }
      const load = (cluster: ClusterRow) => held(cluster.id, spec.gpu);
      const cluster = offering.filter((candidate) => capacityLeft(candidate, spec.gpu) > 0).sort((a, b) => load(a) - load(b))[0];
      if (!cluster) continue;
      const launchedAt = at.toISOString();
      const placed = await repo.transition(row.id, ['QUEUED'], {
        status: 'LAUNCHED', cluster_id: cluster.id, backend: cluster.group_name, location: cluster.name, instance_id: randomUUID(),
        instance_state: null, instance_created_at: launchedAt, launched_at: launchedAt, updated_at: launchedAt,
      }, [statusEvent('QUEUED', 'LAUNCHED')]);
      if (!placed) continue; // canceled meanwhile
      flights.set(row.id, await flightOf(placed));
      touched.add(cluster.id);
    }
    for (const clusterId of touched) push(clusterId);
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

  /** Folds one agent report into its task. */
  async function apply(clusterId: string, report: TaskReport): Promise<void> {
    const flight = flights.get(report.taskId);
    if (!flight || flight.clusterId !== clusterId || flight.instanceId !== report.instanceId) {
      // A task this plane stopped wanting: the agent is stopping it, or has.
      const stop = stopping.get(report.taskId);
      if (stop?.clusterId === clusterId && report.state !== 'STARTING' && report.state !== 'RUNNING') {
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
    push(clusterId);
    void schedule();
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

    /** A cluster's agent said hello with the tasks it holds. */
    async agentConnected(cluster: ClusterRow, channel: TaskAgentChannel, reports: TaskReport[]) {
      agents.set(cluster.id, { channel, sent: new Map() });
      awaySince.delete(cluster.id);
      const held = new Map(reports.map((report) => [report.taskId, report]));
      for (const report of reports) await serially(report.taskId, () => apply(cluster.id, report));
      for (const flight of [...flights.values()]) {
        if (flight.clusterId !== cluster.id || held.has(flight.taskId)) continue;
        if (!flight.acknowledged) continue; // never reached the agent: it is sent (again) below
        flights.delete(flight.taskId);
        await serially(flight.taskId, () => end(flight, DISPATCHED, 'ERRORED',
          `the agent of cluster '${cluster.name}' no longer runs this task (the agent restarted)`, { instance_state: 'STOPPED' }));
      }
      for (const [taskId, stop] of [...stopping]) {
        if (stop.clusterId === cluster.id && !held.has(taskId)) stopping.delete(taskId);
      }
      push(cluster.id);
      await schedule();
    },

    agentDisconnected(clusterId: string, channel: TaskAgentChannel) {
      if (agents.get(clusterId)?.channel !== channel) return;
      agents.delete(clusterId);
      awaySince.set(clusterId, now().getTime());
    },

    report(clusterId: string, report: TaskReport): Promise<void> {
      return serially(report.taskId, () => apply(clusterId, report));
    },

    /** The task left QUEUED/LAUNCHED/RUNNING by a user's hand (cancel, delete): its agent stops it. */
    withdraw(taskId: string): void {
      const flight = flights.get(taskId);
      if (!flight) return;
      flights.delete(taskId);
      stopping.set(taskId, { clusterId: flight.clusterId, gpu: flight.gpu });
      push(flight.clusterId);
    },

    /** New secrets for a task: a dispatched one gets its spec again (the agent refreshes the secrets file). */
    secretsChanged(taskId: string, sealed: string, revision: number): void {
      const flight = flights.get(taskId);
      if (!flight) return;
      flight.sealedSecrets = sealed;
      flight.revision = revision;
      push(flight.clusterId);
    },

    /** GPUs of `gpu` that tasks hold on a cluster (dispatched or still stopping), for function placement. */
    tasksOn,

    /** Whether `clusterId` runs the task now (result uploads are taken only from there). */
    runsOn(taskId: string, clusterId: string): boolean {
      return flights.get(taskId)?.clusterId === clusterId;
    },
  };
}

export type TaskScheduler = ReturnType<typeof createTaskScheduler>;
