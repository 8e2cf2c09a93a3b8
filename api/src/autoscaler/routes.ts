// GET /v2/svc/autoscaler/functions: the scaling status of the caller's deployed function versions.
import { z } from 'zod';
import { access } from '../http/auth.ts';
import { route } from '../http/route.ts';
import type { ScalingStatus } from './status.ts';

const scalingSchema = z.object({
  functionId: z.string(),
  functionVersionId: z.string(),
  functionName: z.string(),
  functionStatus: z.string(),
  instances: z.object({ running: z.number().int(), starting: z.number().int() }),
  desiredInstances: z.number().int(),
  minInstances: z.number().int(),
  maxInstances: z.number().int(),
  policy: z.enum(['PLATFORM', 'CUSTOM']),
  reason: z.string(),
  detail: z.string(),
  utilization: z.number().nullable(),
  decidedAt: z.string().nullable(),
  lastInvocationAt: z.string().nullable(),
}).meta({ id: 'FunctionScaling' });

export function autoscalerRoutes(status: ScalingStatus) {
  return [
    route({
      method: 'GET', path: '/v2/svc/autoscaler/functions', summary: "Scaling status of the account's deployed function versions: instances, desired count, why",
      tag: 'Autoscaler', access: access.functions('list_functions', 'deploy_function'),
      responses: { 200: { description: 'One entry per deployed version', schema: z.object({ functions: z.array(scalingSchema) }) } },
      handle: async ({ principal }) => ({ body: { functions: await status.of(principal.ncaId) } }),
    }),
  ];
}
