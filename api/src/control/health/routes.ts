// Health endpoints (spec 4.8): liveness touches nothing; readiness and /health probe every component.
import { z } from 'zod';
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import type { HealthService } from './service.ts';

const tag = 'Health';
const componentSchema = z.object({
  status: z.enum(['healthy', 'unhealthy']), latencyMs: z.number(), error: z.string().optional(),
});
const reportSchema = z.object({ status: z.enum(['healthy', 'unhealthy']), components: z.record(z.string(), componentSchema) })
  .meta({ id: 'HealthReport' });
const statusSchema = z.object({ status: z.enum(['UP', 'DOWN']) });

export function healthRoutes(health: HealthService) {
  return [
    route({
      method: 'GET', path: '/admin/health/liveness', summary: 'Liveness: always 200, checks no dependency', tag,
      access: access.public, responses: { 200: { description: 'Alive', schema: statusSchema } },
      handle: async () => ({ body: { status: 'UP' } }),
    }),
    route({
      method: 'GET', path: '/admin/health/readiness', summary: 'Readiness: 200 only when every component is healthy', tag,
      access: access.public,
      responses: { 200: { description: 'Ready', schema: statusSchema }, 503: { description: 'A component is unhealthy', schema: statusSchema } },
      handle: async () => {
        const report = await health.report();
        return report.status === 'healthy' ? { body: { status: 'UP' } } : { status: 503, body: { status: 'DOWN' } };
      },
    }),
    route({
      method: 'GET', path: '/health', summary: 'Per-component health', tag, access: access.public,
      responses: { 200: { description: 'All healthy', schema: reportSchema }, 503: { description: 'Some component unhealthy', schema: reportSchema } },
      handle: async () => {
        const report = await health.report();
        return { status: report.status === 'healthy' ? 200 : 503, body: report };
      },
    }),
  ];
}
