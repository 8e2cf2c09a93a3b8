// The streaming plane as main.ts composes it: the STUN/TURN server sessions are given, the session broker
// (which keeps started sessions in the store for a take-over), and the owners' listing of sessions, read
// from the broker where placement runs here, else asked of the replica where it does.
import type { Kysely } from 'kysely';
import type { Database } from '../store/schema.ts';
import type { Config } from '../config.ts';
import type { FunctionsRepo } from '../control/functions/repo.ts';
import type { FunctionsService } from '../control/functions/service.ts';
import type { InstancesService } from '../control/instances/service.ts';
import type { CredentialVerifier } from '../domain/principal.ts';
import type { ReplicaLinks } from '../invocation/replica-signing.ts';
import type { Logger } from '../logger.ts';
import { startTurn } from '../turn/server.ts';
import { createStreamingBroker } from './broker.ts';
import { createSessionRecords, type StreamingSessionsDatabase } from './session-records.ts';
import { createSessionListing } from './sessions.ts';
import { relaySessionAsks } from './sessions-relay.ts';

export interface StreamingPlaneParts {
  settings: Config['streaming'];
  turn: Config['turn'] & { secret: string; runDir: string };
  db: Kysely<Database>;
  verifier: CredentialVerifier;
  functionsRepo: FunctionsRepo;
  functions: Pick<FunctionsService, 'get'>;
  instances: InstancesService;
  /** Whether this replica always runs placement (then its broker is the one that answers). */
  placesHere: boolean;
  links?: ReplicaLinks;
  log: Logger;
  now: () => Date;
}

export async function createStreamingPlane(parts: StreamingPlaneParts) {
  const { instances, log } = parts;
  const turn = await startTurn(parts.turn, log);
  const broker = createStreamingBroker({
    verifier: parts.verifier, functionsRepo: parts.functionsRepo, instances, turn, log, now: parts.now, settings: parts.settings,
    records: createSessionRecords(parts.db.withTables<StreamingSessionsDatabase>(), log),
  });
  instances.onReady((versionId, ready) => broker.ready(versionId, ready));
  instances.keepSessions(broker.inSession);
  // Only the placement replica brokers sessions (it knows the ready instances); the others ask it.
  const source = parts.placesHere ? { sessionsOf: async (versionId: string) => broker.sessionsOf(versionId) } : parts.links && relaySessionAsks(parts.links.sessions);
  const listing = createSessionListing({ functions: parts.functions, ...(source ? { source } : {}) });
  return { turn, broker, listing };
}
