// Input assets put in place by the agent of the instance's node before a request reaches it: a `stage`
// message over that node's link, answered by `staged`. One pending exchange per request.
import type { ControlMessage, StageRequest } from '../../compute/protocol.ts';

/** Long enough for a large asset over a slow link; the request ends 500 after it. */
const STAGE_TIMEOUT_MS = 120_000;

interface Pending {
  nodeId: string;
  settle(error?: string): void;
}

export class AssetStaging {
  /** The current link of each node. */
  readonly #links = new Map<string, (message: ControlMessage) => unknown>();
  readonly #pending = new Map<string, Pending>();

  linked(nodeId: string, send: (message: ControlMessage) => unknown) {
    this.#links.set(nodeId, send);
  }

  /** The link went away: what it was staging fails now rather than at the timeout. */
  unlinked(nodeId: string, send: (message: ControlMessage) => unknown) {
    if (this.#links.get(nodeId) !== send) return;
    this.#links.delete(nodeId);
    for (const pending of this.#pending.values()) if (pending.nodeId === nodeId) pending.settle('the agent link was lost');
  }

  stage(nodeId: string | undefined, request: Omit<StageRequest, 'type'>): Promise<void> {
    const send = nodeId === undefined ? undefined : this.#links.get(nodeId);
    if (!send || nodeId === undefined) return Promise.reject(new Error('the agent of the instance is not linked'));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => settle('the agent did not answer in time'), STAGE_TIMEOUT_MS);
      const settle = (error?: string) => {
        clearTimeout(timer);
        this.#pending.delete(request.requestId);
        if (error) reject(new Error(error));
        else resolve();
      };
      this.#pending.set(request.requestId, { nodeId, settle });
      send({ type: 'stage', ...request });
    });
  }

  /** The agent's `staged` answer. */
  staged(requestId: string, error?: string) {
    this.#pending.get(requestId)?.settle(error);
  }
}
