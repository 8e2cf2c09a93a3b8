// What GET /v2/svc/autoscaler/functions answers (and `svc autoscaler status` reads): per deployed version,
// its instances now, the desired count and the autoscaler's last reason.
import { z } from 'zod';

export const functionScalingSchema = z.object({
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

export const functionScalingResponse = z.object({ functions: z.array(functionScalingSchema) });

export type FunctionScaling = z.infer<typeof functionScalingSchema>;
