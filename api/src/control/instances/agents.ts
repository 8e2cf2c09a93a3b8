// The agent links placement talks to, one per cluster, and what each was last sent. An agent always
// gets its whole desired set; a set is compared by its fingerprint first, so an unchanged one costs no
// spec building (function reads, secret decryption) and no message.
import type { InstanceSpec } from '../../compute/protocol.ts';
import type { InstanceRow } from './repo.ts';

/** The control plane's end of one agent link. */
export interface AgentChannel {
  sendDesired(instances: InstanceSpec[]): void;
}

/** What a desired set is compared by: its instances' ids, in placement's order. */
export function fingerprintOf(instances: InstanceRow[]): string {
  return instances.map((row) => row.instance_id).join(',');
}

export class AgentLinks {
  readonly #channels = new Map<string, AgentChannel>();
  /** clusterId → fingerprint of the set its agent was last sent. */
  readonly #sent = new Map<string, string>();

  /** Links a cluster's agent; its next push sends the whole set. True when an older link was replaced. */
  connect(clusterId: string, channel: AgentChannel): boolean {
    const previous = this.#channels.get(clusterId);
    this.#channels.set(clusterId, channel);
    this.#sent.delete(clusterId);
    return previous !== undefined && previous !== channel;
  }

  /** Unlinks the agent, unless a newer link has already replaced `channel`. */
  disconnect(clusterId: string, channel: AgentChannel): void {
    if (this.#channels.get(clusterId) !== channel) return;
    this.#channels.delete(clusterId);
    this.#sent.delete(clusterId);
  }

  connected(clusterId: string): boolean {
    return this.#channels.has(clusterId);
  }

  /** Sends each linked agent its desired set if it changed since the last one it was sent; only those sets are built. */
  async push(desiredOn: (clusterId: string) => InstanceRow[], build: (instances: InstanceRow[]) => Promise<InstanceSpec[]>): Promise<void> {
    for (const [clusterId, channel] of this.#channels) {
      const instances = desiredOn(clusterId);
      const fingerprint = fingerprintOf(instances);
      if (this.#sent.get(clusterId) === fingerprint) continue;
      channel.sendDesired(await build(instances));
      if (this.#channels.get(clusterId) === channel) this.#sent.set(clusterId, fingerprint);
    }
  }
}
