// The hub's task part: each agent link speaks for one node, and the task scheduler places each task on one
// node (tasks/scheduler.ts) and sends each node's agent only its own tasks. A newer link of a node
// replaces its older one, and a report counts only from the node's current link. A closed link costs no
// task: the node keeps its tasks while its lease runs and its agent gets them again when it links again;
// when the lease lapses, the scheduler ends the tasks the node held.
import type { TaskReport, TaskSpec } from '../../compute/protocol.ts';
import type { NodeRow } from '../clusters/nodes.ts';
import type { ClusterRow } from '../clusters/repo.ts';
import type { TaskAgents } from './hub.ts';

export interface TaskLink {
  nodeId: string;
  cluster: ClusterRow;
  channel: { sendTasks(desired: string[], specs: TaskSpec[]): void };
}

export class TaskNodes {
  readonly #tasks: TaskAgents;
  /** nodeId → its current link. */
  readonly #links = new Map<string, TaskLink>();

  constructor(tasks: TaskAgents) {
    this.#tasks = tasks;
  }

  /** A node's agent linked, holding `reports`' tasks: it is sent its own, and stops the others. */
  async linked(link: TaskLink, reports: TaskReport[]): Promise<void> {
    this.#links.set(link.nodeId, link);
    await this.#tasks.agentConnected(link.nodeId, link.cluster, link.channel, reports);
  }

  /** A task report over a link: taken only from the node's current link. */
  async reported(link: TaskLink, report: TaskReport): Promise<void> {
    if (this.#links.get(link.nodeId) === link) await this.#tasks.report(link.nodeId, report);
  }

  /** A node's link closed: its tasks wait for it while its lease runs. */
  unlinked(link: TaskLink): void {
    if (this.#links.get(link.nodeId) !== link) return;
    this.#links.delete(link.nodeId);
    this.#tasks.agentDisconnected(link.nodeId, link.channel);
  }

  /** A node's lease lapsed: its tasks end, and nothing more is taken from a link it may still have. */
  async lapsed(node: NodeRow): Promise<void> {
    this.#links.delete(node.id);
    await this.#tasks.nodeLapsed(node);
  }
}
