// `svc function stats`: a version's numbers (GET …/stats), totals and one line per step.
import { functionStatsResponse, versionStatsResponse, type VersionStats } from '../../control/stats/schema.ts';
import { call, CliError } from '../client.ts';
import { fields, parseDuration, table } from '../format.ts';
import type { Command } from '../command.ts';
import { bearer } from './functions.ts';

const USAGE = 'svc function stats <functionId> [versionId] [--since 1h] [--step 5m]';

function isoSeconds(value: unknown, flag: string): string | undefined {
  if (typeof value !== 'string') return undefined;
  try {
    return `PT${parseDuration(value, flag)}S`;
  } catch (error) {
    throw new CliError((error as Error).message);
  }
}

const latency = (stats: { latencyMs: VersionStats['totals']['latencyMs'] }) => ({
  p50Ms: stats.latencyMs?.p50, p99Ms: stats.latencyMs?.p99,
});

function render(stats: VersionStats): string {
  const { totals } = stats;
  const head = fields({
    functionId: stats.functionId, versionId: stats.functionVersionId, window: `${stats.since} → ${stats.until}`, step: `${stats.stepSeconds}s`,
    requests: totals.requests, requestsPerSecond: totals.requestsPerSecond, ...latency(totals), meanMs: totals.latencyMs?.mean,
    clientErrors: totals.clientErrors, rateLimited: totals.rateLimited, serverErrors: totals.serverErrors,
    queueMax: totals.queueDepth.max, inflightMax: totals.inflight.max,
  });
  const rows = stats.points.map((point) => ({
    at: point.at, requests: point.requests, rps: point.requestsPerSecond, ...latency(point),
    '4xx': point.clientErrors, '429': point.rateLimited, '5xx': point.serverErrors,
    queueMax: point.queueDepth.max, queueMean: point.queueDepth.mean, inflightMax: point.inflight.max,
  }));
  return `${head}\n\n${table(rows, ['at', 'requests', 'rps', 'p50Ms', 'p99Ms', '4xx', '429', '5xx', 'queueMax', 'queueMean', 'inflightMax'])}`;
}

const functionStats: Command = {
  summary: "A version's request rate, latency (p50, p99), errors and queue depth over the last hour (--since, --step)",
  usage: '<functionId> [versionId] [--since 1h] [--step 5m]',
  options: { since: { type: 'string' }, step: { type: 'string' } },
  async run(context) {
    const [functionId, versionId] = context.positionals.map(encodeURIComponent);
    if (!functionId) throw new CliError(`usage: ${USAGE}`);
    const query = new URLSearchParams({ since: isoSeconds(context.values.since ?? '1h', '--since')!, step: isoSeconds(context.values.step ?? '5m', '--step')! });
    const options = { bearer: bearer(context, 'read') };
    if (versionId) {
      const { stats } = await call(context.state, 'api', 'GET', `/v2/svc/functions/${functionId}/versions/${versionId}/stats?${query}`, versionStatsResponse, options);
      context.print(render(stats), { stats });
      return;
    }
    const { stats } = await call(context.state, 'api', 'GET', `/v2/svc/functions/${functionId}/stats?${query}`, functionStatsResponse, options);
    context.print(stats.map(render).join('\n\n'), { stats });
  },
};

export const statsCommands: Record<string, Command> = { 'function stats': functionStats };
