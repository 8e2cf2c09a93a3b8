// A bridge network per account (dockerNetwork: account), made the first time one of its instances starts
// on this agent, labelled svc.agent and svc.account, its bridge named svcd<agent tag><account hash> so that
// the agent's firewall (docker-firewall.ts) knows it; the platform still reaches each instance through its
// published ports. cleanup() removes this agent's networks that no container uses; close() also takes its
// firewall table away once none is left.
import { createHash } from 'node:crypto';
import type { Logger } from '../../logger.ts';
import { DockerError, type DockerApi } from './docker-api.ts';
import { applyFirewall, BRIDGE_PREFIX, removeFirewall } from './docker-firewall.ts';
import { z } from 'zod';

const networkList = z.array(z.object({ Id: z.string(), Name: z.string() }));

export class AccountNetworks {
  readonly #api: DockerApi;
  readonly #agentName: string;
  readonly #tag: string;
  readonly #hostPorts: number[];
  readonly #log: Logger;
  #firewall: Promise<void> | undefined;

  constructor(api: DockerApi, agentName: string, hostPorts: number[], log: Logger) {
    this.#api = api;
    this.#agentName = agentName;
    this.#tag = agentTag(agentName);
    this.#hostPorts = hostPorts;
    this.#log = log;
  }

  /**
   * The network of the account's containers on this agent, made (and the firewall in place) if need be.
   * Asked of the engine at every start: a network removed meanwhile is made again.
   */
  async of(accountId: string): Promise<string> {
    this.#firewall ??= applyFirewall(this.#tag, this.#hostPorts).catch((error: unknown) => {
      this.#firewall = undefined;
      throw error;
    });
    await this.#firewall;
    const account = sha256(accountId);
    const name = `${this.#agentName}-${account.slice(0, 16)}`;
    await this.#ensure(name, `${BRIDGE_PREFIX}${this.#tag}${account.slice(0, 7)}`, accountId);
    return name;
  }

  async #ensure(name: string, bridge: string, accountId: string): Promise<void> {
    if (await this.#exists(name)) return;
    try {
      await this.#api.call('POST', '/networks/create', {
        body: {
          Name: name, Driver: 'bridge', CheckDuplicate: true,
          Options: { 'com.docker.network.bridge.name': bridge },
          Labels: { 'svc.agent': this.#agentName, 'svc.account': accountId },
        },
      });
    } catch (error) {
      // Made by a start racing this one (Docker says 409, podman 500): the same name is the same network.
      if (!(error instanceof DockerError) || !await this.#exists(name)) throw error;
    }
  }

  async #exists(name: string): Promise<boolean> {
    try {
      await this.#api.call('GET', `/networks/${name}`);
      return true;
    } catch {
      return false;
    }
  }

  /** Removes this agent's account networks that no container uses (run after its leftover containers are gone). */
  async cleanup(): Promise<void> {
    for (const network of await this.#list()) {
      await this.#api.call('DELETE', `/networks/${network.Id}`)
        .catch((error: unknown) => this.#log.info({ err: error, network: network.Name }, 'account network kept'));
    }
  }

  /** Once the agent's containers are gone: its networks, then its firewall table (kept while a network is). */
  async close(): Promise<void> {
    try {
      await this.cleanup();
      if ((await this.#list()).length) return;
      this.#firewall = undefined;
      await removeFirewall(this.#tag);
    } catch (error) {
      this.#log.warn({ err: error }, 'account networks not removed');
    }
  }

  #list() {
    return this.#api.call('GET', '/networks', { query: { filters: JSON.stringify({ label: [`svc.agent=${this.#agentName}`] }) } }, networkList);
  }
}

/** 4 hex digits of an agent's name: its bridges' prefix and its firewall table's suffix. */
export function agentTag(agentName: string): string {
  return sha256(agentName).slice(0, 4);
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
