// Telemetry endpoints (scope manage_telemetries).
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import { createTelemetrySchema, telemetryListResponse, telemetryParams, telemetryResponse } from './schema.ts';
import type { TelemetriesService } from './service.ts';

const tag = 'Telemetries';
const manage = access.functions('manage_telemetries');

export function telemetryRoutes(telemetries: TelemetriesService) {
  return [
    route({
      method: 'GET', path: '/v2/svc/telemetries', summary: "List the account's telemetries", tag, access: manage,
      responses: { 200: { description: 'Telemetries (never their secrets)', schema: telemetryListResponse } },
      handle: async ({ principal }) => ({ body: { telemetries: await telemetries.list(principal) } }),
    }),
    route({
      method: 'POST', path: '/v2/svc/telemetries', summary: 'Create a telemetry (an export endpoint)', tag, access: manage,
      body: createTelemetrySchema,
      responses: { 200: { description: 'The telemetry', schema: telemetryResponse } },
      handle: async ({ principal, body }) => ({ body: { telemetry: await telemetries.create(principal, body) } }),
    }),
    route({
      method: 'GET', path: '/v2/svc/telemetries/{telemetryId}', summary: 'Get a telemetry', tag, access: manage, params: telemetryParams,
      responses: { 200: { description: 'The telemetry', schema: telemetryResponse } },
      handle: async ({ principal, params }) => ({ body: { telemetry: await telemetries.get(principal, params.telemetryId) } }),
    }),
    route({
      method: 'DELETE', path: '/v2/svc/telemetries/{telemetryId}', summary: 'Delete a telemetry', tag, access: manage, params: telemetryParams,
      responses: { 204: { description: 'Deleted' } },
      handle: async ({ principal, params }) => {
        await telemetries.remove(principal, params.telemetryId);
        return { status: 204 };
      },
    }),
  ];
}
