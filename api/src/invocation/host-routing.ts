// Host-routed invocation (wire-reference 5; the reference's "transparent load balancer"): a request to
// `<functionId>.invocation.<address>` or `<versionId>.<functionId>.invocation.<address>`, or to
// `invocation.<address>` with `function-id` (and `function-version-id`) headers, goes to that function
// with its own method, path and query. The headers win over the host, as in the reference. Anything else
// on the invocation host is served as on the api host (pexec, its status and the queues among the rest).
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { hostnameOf } from '../http/host.ts';

const ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface FunctionRouting {
  functionId: string;
  functionVersionId?: string;
}

function fromHeaders(headers: IncomingHttpHeaders): FunctionRouting | undefined {
  const functionId = headers['function-id'];
  if (typeof functionId !== 'string' || !ID.test(functionId)) return undefined;
  const versionId = headers['function-version-id'];
  return typeof versionId === 'string' && ID.test(versionId) ? { functionId, functionVersionId: versionId } : { functionId };
}

/** `<function>.` or `<version>.<function>.` in front of `.<invocationHost>`. */
function fromHost(hostname: string, invocationHost: string): FunctionRouting | undefined {
  if (!hostname.endsWith(`.${invocationHost}`)) return undefined;
  const ids = hostname.slice(0, -invocationHost.length - 1).split('.');
  if (!ids.every((id) => ID.test(id))) return undefined;
  if (ids.length === 1) return { functionId: ids[0] };
  if (ids.length === 2) return { functionId: ids[1], functionVersionId: ids[0] };
  return undefined;
}

export function functionRoutingOf(req: IncomingMessage, invocationHost: string): FunctionRouting | undefined {
  return fromHeaders(req.headers) ?? fromHost(hostnameOf(req.headers.host), invocationHost);
}

/** The invocation host's handler: host-routed requests to `serve`, the rest to `byPath`. */
export function invocationHostHandler(options: {
  invocationHost: string;
  serve(routing: FunctionRouting, req: IncomingMessage, res: ServerResponse): void;
  byPath(req: IncomingMessage, res: ServerResponse): void;
}) {
  return (req: IncomingMessage, res: ServerResponse) => {
    const routing = functionRoutingOf(req, options.invocationHost);
    if (routing) options.serve(routing, req, res);
    else options.byPath(req, res);
  };
}
