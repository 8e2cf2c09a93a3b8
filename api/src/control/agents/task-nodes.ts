// Tasks of a cluster go to one of its nodes at a time (the task scheduler counts per cluster): the first
// node linked holds the cluster's tasks; when its link closes, another linked node takes them over. A
// node that links while another holds them is told to run no task, so one that ran tasks before (and
// lost the role meanwhile) stops them rather than running them twice.
import type { TaskSpec } from '../../compute/protocol.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import type { TaskReport } from '../../compute/protocol.ts';
import type { TaskScheduler } from '../tasks/scheduler.ts';

export interface TaskLink {
  nodeId: string;
  cluster: ClusterRow;
  channel: { sendTasks(desired: string[], specs: TaskSpec[]): void };
}

export class TaskNodes {
  readonly #tasks: Pick<TaskScheduler, 'agentConnected' | 'agentDisconnected'>;
  /** clusterId → the links of its nodes, in the order they linked; the first holds the tasks. */
  readonly #links = new Map<string, TaskLink[]>();

  constructor(tasks: Pick<TaskScheduler, 'agentConnected' | 'agentDisconnected'>) {
    this.#tasks = tasks;
  }

  /** A node linked; a newer link of the same node takes the place (and the role) of its older one. */
  async linked(link: TaskLink, reports: TaskReport[]): Promise<void> {
    const links = (this.#links.get(link.cluster.id) ?? []).filter((other) => other.nodeId !== link.nodeId);
    const holder = links[0];
    const previous = this.#links.get(link.cluster.id)?.find((other) => other.nodeId === link.nodeId);
    const takesOver = !holder || previous === this.#links.get(link.cluster.id)?.[0];
    if (takesOver) links.unshift(link);
    else links.push(link);
    this.#links.set(link.cluster.id, links);
    if (takesOver) await this.#tasks.agentConnected(link.cluster, link.channel, reports);
    else if (reports.length) link.channel.sendTasks([], []);
  }

  holds(link: TaskLink): boolean {
    return this.#links.get(link.cluster.id)?.[0] === link;
  }

  /** A node's link closed: if it held the tasks, the next linked node takes them (it runs none). */
  async unlinked(link: TaskLink): Promise<void> {
    const links = this.#links.get(link.cluster.id) ?? [];
    const index = links.indexOf(link);
    if (index === -1) return;
    links.splice(index, 1);
    if (links.length === 0) this.#links.delete(link.cluster.id);
    if (index !== 0) return;
    this.#tasks.agentDisconnected(link.cluster.id, link.channel);
    const next = links[0];
    if (next) await this.#tasks.agentConnected(next.cluster, next.channel, []);
  }
}
