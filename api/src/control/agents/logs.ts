// Instances' logs, asked of the agents that keep them (compute/output-logs.ts) over their links: a `logs`
// request per agent, answered by `log-lines` for its streamId (protocol.ts). The kept lines of every agent
// asked are merged by time once each has caught up (or has not answered within HISTORY_TIMEOUT_MS: it is
// left out), the tail applied to the whole; when following, new lines are passed on as they come until
// the caller stops (`logs-stop`) or an agent's link ends (that agent's lines end with it).
import { randomUUID } from 'node:crypto';
import type { ControlMessage, LogLine, LogLinesMessage } from '../../compute/protocol.ts';

/** How long the kept lines wait for an agent that does not answer. */
const HISTORY_TIMEOUT_MS = 5000;

export interface LogsQuery {
  functionVersionId: string;
  instanceId?: string;
  /** ISO 8601 instant. */
  since?: string;
  tail?: number;
}

export interface LogFollower {
  /** The kept lines, merged, oldest first; once. */
  onHistory(lines: LogLine[]): void;
  /** New lines, in the order each agent wrote them. */
  onLines(lines: LogLine[]): void;
}

type Send = (message: ControlMessage) => unknown;

interface Stream {
  /** The agents asked, by cluster; only their answers count. */
  asked: Set<string>;
  received(clusterId: string, message: LogLinesMessage): void;
  gone(clusterId: string): void;
}

/** Oldest first (stable within one instant), the last `tail` when given. */
function merged(lines: LogLine[], tail: number | undefined): LogLine[] {
  const sorted = [...lines].sort((a, b) => (a.timestamp < b.timestamp ? -1 : a.timestamp > b.timestamp ? 1 : 0));
  return tail === undefined ? sorted : sorted.slice(-tail);
}

export class LogRelay {
  /** The current link of each cluster. */
  readonly #links = new Map<string, Send>();
  readonly #streams = new Map<string, Stream>();

  linked(clusterId: string, send: Send): void {
    this.#links.set(clusterId, send);
  }

  unlinked(clusterId: string, send: Send): void {
    if (this.#links.get(clusterId) !== send) return;
    this.#links.delete(clusterId);
    for (const stream of this.#streams.values()) if (stream.asked.has(clusterId)) stream.gone(clusterId);
  }

  /** An agent's `log-lines`: for a stream it was asked for, else ignored. */
  received(clusterId: string, message: LogLinesMessage): void {
    const stream = this.#streams.get(message.streamId);
    if (stream?.asked.has(clusterId)) stream.received(clusterId, message);
  }

  /** The kept lines of the clusters given (those linked), merged, oldest first. */
  read(clusterIds: string[], query: LogsQuery): Promise<LogLine[]> {
    return new Promise((resolve) => {
      const stop = this.#open(clusterIds, query, false, {
        onHistory: (lines) => {
          stop();
          resolve(lines);
        },
        onLines: () => {},
      });
    });
  }

  /** The kept lines, then every new one, until the returned function is called. */
  follow(clusterIds: string[], query: LogsQuery, follower: LogFollower): () => void {
    return this.#open(clusterIds, query, true, follower);
  }

  #open(clusterIds: string[], query: LogsQuery, follow: boolean, follower: LogFollower): () => void {
    const streamId = randomUUID();
    const asked = new Set(clusterIds.filter((id) => this.#links.has(id)));
    const waiting = new Set(asked);
    const history: LogLine[] = [];
    let caughtUp = false;
    const timer = setTimeout(() => catchUp(), HISTORY_TIMEOUT_MS);
    const catchUp = () => {
      if (caughtUp) return;
      caughtUp = true;
      clearTimeout(timer);
      follower.onHistory(merged(history, query.tail));
    };
    const settled = (clusterId: string) => {
      waiting.delete(clusterId);
      if (!waiting.size) catchUp();
    };
    this.#streams.set(streamId, {
      asked,
      received(clusterId, message) {
        if (caughtUp) follower.onLines(message.lines);
        else history.push(...message.lines);
        if (message.caughtUp) settled(clusterId);
      },
      gone(clusterId) {
        asked.delete(clusterId);
        settled(clusterId);
      },
    });
    for (const clusterId of asked) this.#links.get(clusterId)!({ type: 'logs', streamId, ...query, follow });
    if (!waiting.size) queueMicrotask(catchUp);
    return () => {
      clearTimeout(timer);
      if (!this.#streams.delete(streamId) || !follow) return;
      for (const clusterId of asked) this.#links.get(clusterId)?.({ type: 'logs-stop', streamId });
    };
  }
}
