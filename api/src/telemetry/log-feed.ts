// Every line a function's instances write reaches its LOGS telemetry. On the replica that holds the agents'
// links, a version with ready instances that names a LOGS telemetry is followed over those links (the
// agents keep and stream each instance's output, compute/output-logs.ts) from the moment it is seen, and
// each new batch goes to the export. A version that names none costs one store read per REASK_MS.
import type { LogLine as AgentLogLine } from '../compute/protocol.ts';
import type { LogFollower } from '../control/agents/logs.ts';
import type { Logger } from '../logger.ts';
import type { LogLine } from './sink.ts';

/** How long a version found to name no LOGS telemetry is not asked again (a function's telemetries never change). */
const REASK_MS = 60_000;

export interface LogFeedOptions {
  /** The account of a version that names a LOGS telemetry, else undefined. */
  logsOwner(versionId: string): Promise<string | undefined>;
  /** The clusters whose agents may hold the account's instances. */
  clustersOf(ncaId: string): Promise<string[]>;
  follow(clusterIds: string[], query: { functionVersionId: string; since: string }, follower: LogFollower): () => void;
  exportLines(versionId: string, lines: LogLine[]): void;
  now(): Date;
  log: Logger;
}

export class LogFeed {
  readonly #options: LogFeedOptions;
  /** Followed versions → how to stop (a no-op while the follow is being set up). */
  readonly #followed = new Map<string, () => void>();
  readonly #silentUntil = new Map<string, number>();

  constructor(options: LogFeedOptions) {
    this.#options = options;
  }

  /** Placement's ready instances of a version (after every round): followed while it has any. */
  ready(versionId: string, instances: readonly unknown[]): void {
    if (instances.length === 0) return this.#stop(versionId);
    if (this.#followed.has(versionId) || (this.#silentUntil.get(versionId) ?? 0) > this.#options.now().getTime()) return;
    this.#followed.set(versionId, () => {});
    this.#start(versionId).catch((error: unknown) => {
      this.#followed.delete(versionId);
      this.#options.log.warn({ err: error, versionId }, 'could not follow a version\'s logs for its telemetry');
    });
  }

  close(): void {
    for (const versionId of [...this.#followed.keys()]) this.#stop(versionId);
  }

  /** Whether the version's lines stream already (so a failed instance's last lines need not be sent again). */
  follows(versionId: string): boolean {
    return this.#followed.has(versionId);
  }

  async #start(versionId: string): Promise<void> {
    const ncaId = await this.#options.logsOwner(versionId);
    if (!ncaId) {
      this.#followed.delete(versionId);
      this.#silentUntil.set(versionId, this.#options.now().getTime() + REASK_MS);
      return;
    }
    const clusterIds = await this.#options.clustersOf(ncaId);
    if (!this.#followed.has(versionId)) return; // its instances went while the store was read
    const send = (lines: AgentLogLine[]) => this.#options.exportLines(versionId, lines.map((line) => ({
      text: line.text, at: Date.parse(line.timestamp), stream: line.stream, instanceId: line.instanceId,
    })));
    const query = { functionVersionId: versionId, since: this.#options.now().toISOString() };
    this.#followed.set(versionId, this.#options.follow(clusterIds, query, { onHistory: send, onLines: send }));
  }

  #stop(versionId: string): void {
    this.#followed.get(versionId)?.();
    this.#followed.delete(versionId);
  }
}

/**
 * The feed of the replica that runs placement: started with its term (roles/placement.ts), stopped with
 * it. In between nothing is followed, and a failed instance's last lines go out with its report instead.
 */
export class PlacementLogFeed {
  readonly #options: LogFeedOptions;
  #feed: LogFeed | undefined;

  constructor(options: LogFeedOptions) {
    this.#options = options;
  }

  /** Follows from now on; the result stops it. */
  start(): () => void {
    const feed = this.#feed = new LogFeed(this.#options);
    return () => {
      feed.close();
      if (this.#feed === feed) this.#feed = undefined;
    };
  }

  ready(versionId: string, instances: readonly unknown[]): void {
    this.#feed?.ready(versionId, instances);
  }

  follows(versionId: string): boolean {
    return this.#feed?.follows(versionId) ?? false;
  }
}
