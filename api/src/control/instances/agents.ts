// The agent links placement talks to, one per node (an agent of a cluster), and what each was last sent. An agent always
// gets its whole desired set; a set is compared by its fingerprint first, so an unchanged one costs no
// spec building (function reads, secret decryption) and no message.
import type { InstanceSpec } from '../../compute/protocol.ts';
import type { InstanceRow } from './repo.ts';

/** The control plane's end of one agent link. */
export interface AgentChannel {
  sendDesired(instances: InstanceSpec[]): void;
  /** Ends the link (its node's lease lapsed while it looked open): the agent links again and is fenced. */
  close(reason: string): void;
}

/** What a desired set is compared by: its instances' ids, in placement's order. */
export function fingerprintOf(instances: InstanceRow[]): string {
  return instances.map((row) => row.instance_id).join(',');
}

export class AgentLinks {
  readonly #channels = new Map<string, AgentChannel>();
  /** nodeId → fingerprint of the set its agent was last sent. */
  readonly #sent = new Map<string, string>();

  /** Links a node's agent; its next push sends the whole set. True when an older link was replaced. */
  connect(nodeId: string, channel: AgentChannel): boolean {
    const previous = this.#channels.get(nodeId);
    this.#channels.set(nodeId, channel);
    this.#sent.delete(nodeId);
    return previous !== undefined && previous !== channel;
  }

  /** Unlinks the agent, unless a newer link has already replaced `channel`; true when it was the node's link. */
  disconnect(nodeId: string, channel: AgentChannel): boolean {
    if (this.#channels.get(nodeId) !== channel) return false;
    this.#channels.delete(nodeId);
    this.#sent.delete(nodeId);
    return true;
  }

  /** Ends the node's link, if one is open. */
  drop(nodeId: string): void {
    const channel = this.#channels.get(nodeId);
    if (!channel) return;
    this.disconnect(nodeId, channel);
    channel.close('lease lapsed');
  }

  /** Sends each linked agent its desired set if it changed since the last one it was sent; only those sets are built. */
  async push(desiredOn: (nodeId: string) => InstanceRow[], build: (instances: InstanceRow[]) => Promise<InstanceSpec[]>): Promise<void> {
    for (const [nodeId, channel] of this.#channels) {
      const instances = desiredOn(nodeId);
      const fingerprint = fingerprintOf(instances);
      if (this.#sent.get(nodeId) === fingerprint) continue;
      channel.sendDesired(await build(instances));
      if (this.#channels.get(nodeId) === channel) this.#sent.set(nodeId, fingerprint);
    }
  }
}
