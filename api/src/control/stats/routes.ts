// The owners' numbers (docs/api.md "Numbers for owners"): what a console plots and `svc function stats` prints.
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import { functionParams, versionParams } from '../functions/schema.ts';
import { functionStatsResponse, statsQuery, versionStatsResponse } from './schema.ts';
import type { StatsService } from './service.ts';

const tag = 'Functions';
const read = access.functions('list_functions', 'list_functions_details', 'queue_details');

export function statsRoutes(stats: StatsService) {
  return [
    route({
      method: 'GET', path: '/v2/svc/functions/{functionId}/versions/{functionVersionId}/stats', tag, access: read,
      summary: "A version's request rate, latency percentiles, errors and queue depth over a window (since, step)",
      params: versionParams, query: statsQuery,
      responses: { 200: { description: 'Totals and one point per step', schema: versionStatsResponse } },
      handle: async ({ principal, params, query }) => ({
        body: { stats: await stats.version(principal, params.functionId, params.functionVersionId, query) },
      }),
    }),
    route({
      method: 'GET', path: '/v2/svc/functions/{functionId}/stats', tag, access: read,
      summary: "The same for each version of a function, newest first", params: functionParams, query: statsQuery,
      responses: { 200: { description: 'One entry per version', schema: functionStatsResponse } },
      handle: async ({ principal, params, query }) => ({ body: { stats: await stats.function(principal, params.functionId, query) } }),
    }),
  ];
}
