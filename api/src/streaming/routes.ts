// The owner's view of a STREAMING function's sessions (docs/api.md, "Streaming sessions"), read with the
// scopes that read the function; another account's version is 404.
import { access } from '../http/auth.ts';
import { route } from '../http/route.ts';
import { versionParams } from '../control/functions/schema.ts';
import { sessionsResponse, type SessionListing } from './sessions.ts';

export function sessionRoutes(listing: SessionListing) {
  return [
    route({
      method: 'GET', path: '/v2/svc/functions/{functionId}/versions/{functionVersionId}/sessions',
      summary: "Who streams a STREAMING version and who waits in its line", tag: 'Functions',
      access: access.functions('list_functions', 'list_functions_details'), params: versionParams,
      responses: {
        200: {
          description: 'Sessions holding an instance of the version (GRANTED, STREAMING, RESUMING), then those waiting in line in order; none for a function that does not stream',
          schema: sessionsResponse,
        },
      },
      handle: async ({ principal, params }) => ({ body: { sessions: await listing.list(principal, params.functionId, params.functionVersionId) } }),
    }),
  ];
}
