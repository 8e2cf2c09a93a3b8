// The gateway as main.ts composes it: one listener for three hosts. The api host (with the web console),
// the key service's host, and the invocation host (host-routed calls served lean, the rest as on the api
// host). On the api host agents' links upgrade to placement, and session sockets to the broker or, when
// another replica's broker has the sessions, to that replica.
import type { Config } from '../config.ts';
import { AGENT_LINK_PATH } from '../compute/protocol.ts';
import { withConsole } from '../console/server.ts';
import { createApp, type AppOptions } from '../http/app.ts';
import { forwardUpgrade, type ForwardTarget } from '../http/forward.ts';
import { leanServer } from '../http/lean.ts';
import { withOpenApi } from '../http/openapi.ts';
import type { Route } from '../http/route.ts';
import { invocationHostHandler } from '../invocation/host-routing.ts';
import type { StreamingBroker } from '../streaming/broker.ts';
import { createGateway, hostsOf, type Handler, type UpgradeHandler } from './gateway.ts';

export interface GatewayPlaneParts {
  settings: Config['gateway'];
  /** The platform's version, in the key service's OpenAPI document. */
  version: string;
  /** What every host's app is given besides its routes. */
  appOptions: Omit<AppOptions, 'routes'>;
  /** The api host's handler. */
  api: Handler;
  keyRoutes: Route[];
  /** The route the invocation host serves host-routed calls with. */
  hostRouted: Route;
  broker: Pick<StreamingBroker, 'upgrade'>;
  /** Where agents' links go, and the replica whose broker has the sessions when it is not this one. */
  placement: { agentUpgrade: UpgradeHandler; sessionsElsewhere(): ForwardTarget | undefined };
}

export function createGatewayPlane(parts: GatewayPlaneParts) {
  const { settings, appOptions, api, placement } = parts;
  const serveLean = leanServer({ ...appOptions, host: 'invocation' });
  return createGateway({
    address: settings.address,
    api: withConsole(api),
    keys: createApp({
      ...appOptions, host: 'keys',
      routes: withOpenApi(parts.keyRoutes, { title: 'svc key service', version: parts.version, description: 'API keys and management tokens' }),
    }),
    invocation: invocationHostHandler({
      invocationHost: hostsOf(settings.address).invocation,
      serve: (routing, req, res) => void serveLean(parts.hostRouted, routing, req, res),
      byPath: api,
    }),
    apiUpgrade: (req, socket, head) => {
      if ((req.url ?? '').split('?')[0] === AGENT_LINK_PATH) return placement.agentUpgrade(req, socket, head);
      const elsewhere = placement.sessionsElsewhere();
      if (elsewhere) return forwardUpgrade(req, socket, head, elsewhere);
      void parts.broker.upgrade(req, socket, head);
    },
    tls: settings.tlsCert && settings.tlsKey ? { cert: settings.tlsCert, key: settings.tlsKey } : undefined,
  });
}

export type GatewayPlane = ReturnType<typeof createGatewayPlane>;
