// A granted session's connection: the browser's WebSocket piped to its instance (pipe.ts), and handed to
// the session once the container accepts it; what its closing means is client-gone.ts's.
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { whenClientGoes, type ClientGoneOptions } from './client-gone.ts';
import { createSessionPipe } from './pipe.ts';
import type { ReadyInstances } from './ready-instances.ts';
import type { Session } from './session.ts';

export interface ConnectionOptions extends ClientGoneOptions {
  instances: ReadyInstances;
  /** A session's browser connected for the first time: the session has started. */
  started(session: Session): void;
}

export function createConnections(options: ConnectionOptions) {
  const { log, instances, end } = options;
  const pipe = createSessionPipe(log);
  const clientGone = whenClientGoes(options);

  function attach(session: Session, client: Duplex, resumed: boolean) {
    if (session.ended) return void client.destroy();
    session.connect(client);
    if (!resumed) options.started(session);
    client.once('close', () => void clientGone(session, client));
    log.info({ sessionId: session.id, instanceId: session.instance!.instanceId, resumed }, 'streaming session connected');
  }

  return {
    /** Pipes the upgrade `req` to the session's instance; `items` are the Sec-WebSocket-Protocol items offered. */
    connect(req: IncomingMessage, socket: Duplex, head: Buffer, session: Session, items: string[]) {
      const instance = session.instance!;
      const resumed = session.connectedOnce;
      pipe.connect(req, socket, head, {
        sessionId: session.id, host: instance.endpoint.host, port: instance.endpoint.ports.streaming ?? instance.endpoint.ports.inference,
        path: session.version!.inferenceUrl, items,
        onOpen: (client) => attach(session, client, resumed),
        // A container that cannot be reached at the first connection gives the session up, and rests.
        onFailed: () => {
          if (resumed || session.ended) return;
          instances.rest(instance.instanceId);
          end(session, 'free');
        },
      });
    },

    close() {
      pipe.close();
    },
  };
}
