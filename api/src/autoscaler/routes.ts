// GET /v2/svc/autoscaler/functions: the scaling status of the caller's deployed function versions.
import { access } from '../http/auth.ts';
import { route } from '../http/route.ts';
import { functionScalingResponse } from './schema.ts';
import type { ScalingStatus } from './status.ts';

export function autoscalerRoutes(status: ScalingStatus) {
  return [
    route({
      method: 'GET', path: '/v2/svc/autoscaler/functions', summary: "Scaling status of the account's deployed function versions: instances, desired count, why",
      tag: 'Autoscaler', access: access.functions('list_functions', 'deploy_function'),
      responses: { 200: { description: 'One entry per deployed version', schema: functionScalingResponse } },
      handle: async ({ principal }) => ({ body: { functions: await status.of(principal.ncaId) } }),
    }),
  ];
}
