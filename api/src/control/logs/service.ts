// Logs of a function version's instances and of a task, for the account that owns them (another account's
// ids are 404 as everywhere). The lines are kept by the agents (compute/output-logs.ts) and asked of them
// over their links (control/agents/logs.ts): of every cluster the account may run on, since an instance
// that has ended is forgotten by placement while its agent still keeps its output.
import type { LogLine } from '../../compute/protocol.ts';
import { Problem } from '../../domain/problem.ts';
import type { Principal } from '../../domain/principal.ts';
import type { LogFollower, LogRelay, LogsQuery } from '../agents/logs.ts';
import { usableBy, type ClustersService } from '../clusters/service.ts';
import type { FunctionsService } from '../functions/service.ts';
import type { TasksService } from '../tasks/service.ts';
import { sinceInstant, type LogsQueryInput } from './schema.ts';

export interface LogsOptions {
  functions: Pick<FunctionsService, 'get'>;
  tasks: Pick<TasksService, 'get'>;
  clusters: Pick<ClustersService, 'all'>;
  /** The agents' links (the replica that runs placement), or a relay to them over NATS (the others). */
  relay?: Pick<LogRelay, 'read' | 'follow'>;
  now?: () => Date;
}

/** Whose lines: the agents to ask and the id their instances' output is kept under. */
export interface LogTarget {
  clusterIds: string[];
  functionVersionId: string;
}

export function createLogsService(options: LogsOptions) {
  const now = options.now ?? (() => new Date());

  async function clustersOf(ncaId: string): Promise<string[]> {
    return (await options.clusters.all()).filter((row) => usableBy(ncaId, row)).map((row) => row.id);
  }

  function relay() {
    if (!options.relay) throw new Problem('service-unavailable', 'This API replica neither runs placement, which holds the agents\' links, nor reaches it over NATS; ask the one that does for logs');
    return options.relay;
  }

  function queryOf(target: LogTarget, input: LogsQueryInput): LogsQuery {
    const since = input.since === undefined ? undefined : sinceInstant(input.since, now());
    return {
      functionVersionId: target.functionVersionId,
      ...(input.instanceId === undefined ? {} : { instanceId: input.instanceId }),
      ...(since === undefined ? {} : { since }),
      ...(input.tail === undefined ? {} : { tail: input.tail }),
    };
  }

  return {
    /** The clusters whose agents may hold the account's output (the log feed follows them too). */
    clusterIdsOf: clustersOf,

    /** The version's, or 404 when the account has no such version. */
    async ofVersion(principal: Principal, functionId: string, versionId: string): Promise<LogTarget> {
      const fn = await options.functions.get(principal, functionId, versionId);
      return { clusterIds: await clustersOf(fn.ncaId), functionVersionId: fn.versionId };
    },

    /** The task's (its instance's output is kept under the task id), or 404. */
    async ofTask(principal: Principal, taskId: string): Promise<LogTarget> {
      const task = await options.tasks.get(principal, taskId);
      return { clusterIds: await clustersOf(task.ncaId), functionVersionId: task.id };
    },

    /** The kept lines, oldest first. */
    read(target: LogTarget, input: LogsQueryInput): Promise<LogLine[]> {
      return relay().read(target.clusterIds, queryOf(target, input));
    },

    /** The kept lines, then each new one, until the returned function is called. */
    follow(target: LogTarget, input: LogsQueryInput, follower: LogFollower): () => void {
      return relay().follow(target.clusterIds, queryOf(target, input), follower);
    },
  };
}

export type LogsService = ReturnType<typeof createLogsService>;
