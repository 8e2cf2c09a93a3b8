// Tasks of a cluster go to one of its nodes at a time (the task scheduler counts per cluster): the first
// node linked holds the cluster's tasks. Its link closing does not move them: the node keeps the role
// while its lease runs, so a dropped connection costs no task; once its lease lapses, another linked node
// of the cluster takes them over (the scheduler ends the tasks the lost node held). A node that links
// while another holds them is told to run no task, so one that ran tasks before (and lost the role
// meanwhile) stops them rather than running them twice.
import type { TaskReport, TaskSpec } from '../../compute/protocol.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import type { TaskScheduler } from '../tasks/scheduler.ts';

export interface TaskLink {
  nodeId: string;
  cluster: ClusterRow;
  channel: { sendTasks(desired: string[], specs: TaskSpec[]): void };
}

interface Holder {
  nodeId: string;
  /** Its open link; undefined while it is away (its lease still runs). */
  link?: TaskLink;
}

export class TaskNodes {
  readonly #tasks: Pick<TaskScheduler, 'agentConnected' | 'agentDisconnected'>;
  /** clusterId → the node holding its tasks. */
  readonly #holders = new Map<string, Holder>();
  /** clusterId → the open links of its nodes, in the order they linked. */
  readonly #links = new Map<string, TaskLink[]>();

  constructor(tasks: Pick<TaskScheduler, 'agentConnected' | 'agentDisconnected'>) {
    this.#tasks = tasks;
  }

  /** A node linked (a newer link of a node replaces its older one, role included). */
  async linked(link: TaskLink, reports: TaskReport[]): Promise<void> {
    const clusterId = link.cluster.id;
    this.#links.set(clusterId, [...(this.#links.get(clusterId) ?? []).filter((other) => other.nodeId !== link.nodeId), link]);
    const holder = this.#holders.get(clusterId);
    if (holder && holder.nodeId !== link.nodeId) {
      if (reports.length) link.channel.sendTasks([], []);
      return;
    }
    this.#holders.set(clusterId, { nodeId: link.nodeId, link });
    await this.#tasks.agentConnected(link.cluster, link.channel, reports);
  }

  holds(link: TaskLink): boolean {
    return this.#holders.get(link.cluster.id)?.link === link;
  }

  /** A node's link closed: if it held the tasks, they wait for it while its lease runs. */
  unlinked(link: TaskLink): void {
    const clusterId = link.cluster.id;
    const links = (this.#links.get(clusterId) ?? []).filter((other) => other !== link);
    if (links.length) this.#links.set(clusterId, links);
    else this.#links.delete(clusterId);
    const holder = this.#holders.get(clusterId);
    if (holder?.link !== link) return;
    holder.link = undefined;
    this.#tasks.agentDisconnected(clusterId, link.channel);
  }

  /** A node's lease lapsed: if it held the cluster's tasks, the next linked node takes them (it runs none). */
  async lapsed(clusterId: string, nodeId: string): Promise<void> {
    const holder = this.#holders.get(clusterId);
    if (holder?.nodeId !== nodeId) return;
    this.#holders.delete(clusterId);
    if (holder.link) this.#tasks.agentDisconnected(clusterId, holder.link.channel);
    const next = this.#links.get(clusterId)?.find((link) => link.nodeId !== nodeId);
    if (!next) return;
    this.#holders.set(clusterId, { nodeId: next.nodeId, link: next });
    await this.#tasks.agentConnected(next.cluster, next.channel, []);
  }
}
