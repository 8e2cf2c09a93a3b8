// Answers that outlive their API replica (docs/scale-out.md, "Results outlive their replica"). With
// several replicas, requests reach an instance through its node's result keeper (compute/keeper.ts).
// When the replica sending one goes away, the keeper asks here whether to keep its answer: yes when the
// request was answered 202 and runs, and the node holds an instance of its version. Its record is then
// marked as the node's to finish, by a conditional update: the sweep that ends a gone replica's running
// requests 502 and this mark never both win. The answer the node sends later is stored as the result.
// Each node's keeper key is derived from the replicas' shared key, so one node's key opens no other's keeper.
import { createHmac } from 'node:crypto';
import type { AgentMessage } from '../compute/protocol.ts';
import { keeperToken } from '../compute/keeper.ts';
import type { KeptAnswers as HubKeptAnswers } from '../control/agents/hub.ts';
import type { Logger } from '../logger.ts';
import { problemResult } from './invocation.ts';
import type { DurableResults } from './results.ts';

export interface KeptAnswersOptions {
  results: DurableResults;
  /** The replicas' shared key (replica-signing.ts). */
  replicasKey: string;
  /** Whether the node holds an instance of the version (placement's view: asked only where the agents link). */
  holdsVersionOn(nodeId: string, versionId: string): boolean;
  /** Wakes the pollers of a request whose result was stored. */
  completed(requestId: string): void;
  log: Logger;
}

export class KeptAnswers implements HubKeptAnswers {
  readonly #options: KeptAnswersOptions;
  readonly #keys = new Map<string, string>();

  constructor(options: KeptAnswersOptions) {
    this.#options = options;
  }

  keyFor(nodeId: string): string {
    let key = this.#keys.get(nodeId);
    if (!key) this.#keys.set(nodeId, key = createHmac('sha256', this.#options.replicasKey).update(`keeper\n${nodeId}`).digest('base64url'));
    return key;
  }

  /** What a replica sends the node's keeper with a request to one of its instances. */
  token(nodeId: string, instanceId: string, requestId: string): string {
    return keeperToken(this.keyFor(nodeId), instanceId, requestId);
  }

  async adopt(nodeId: string, requestId: string): Promise<boolean> {
    const record = await this.#options.results.find(requestId);
    if (record?.state !== 'running' || !this.#options.holdsVersionOn(nodeId, record.request.target.versionId)) return false;
    const kept = await this.#options.results.keep(requestId, nodeId);
    if (kept) this.#options.log.info({ reqId: requestId, nodeId }, 'the API replica sending a 202\'d request went away: its node keeps the answer');
    return kept;
  }

  async kept(nodeId: string, { requestId, answer, error }: Extract<AgentMessage, { type: 'kept' }>): Promise<void> {
    const result = answer
      ? { status: answer.status, headers: answer.headers, body: Buffer.from(answer.body, 'base64') }
      : problemResult(502, 'bad-gateway', error ?? 'The node keeping the answer could not read it');
    if (await this.#options.results.storeKept(requestId, nodeId, result)) this.#options.completed(requestId);
  }

  async linked(nodeId: string, keeping: string[]): Promise<void> {
    for (const requestId of await this.#options.results.lostBy(nodeId, new Set(keeping))) this.#options.completed(requestId);
  }
}
