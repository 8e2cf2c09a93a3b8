// Who streams a STREAMING function's version and who waits in its line, for the account that owns it
// (docs/api.md, "Streaming sessions"): the broker's sessions, each with whose credential started it (its
// kind, id and owner; never its secret), since when, and where it stands. Only the replica that runs
// placement brokers sessions; the others ask it over NATS (sessions-relay.ts).
import { z } from 'zod';
import { Problem } from '../domain/problem.ts';
import type { Principal } from '../domain/principal.ts';
import type { FunctionsService } from '../control/functions/service.ts';

export const sessionSubjectSchema = z.object({
  /** SVC_TOKEN or SVC_API_KEY. */
  kind: z.enum(['token', 'api-key']),
  /** The key's or token's id; its value is never shown. */
  credentialId: z.string(),
  /** Whom the credential was issued to. */
  ownerId: z.string(),
}).meta({ id: 'StreamingSessionSubject' });

export const streamingSessionSchema = z.object({
  sessionId: z.string(),
  /** WAITING in line; GRANTED an instance, its browser not yet connected; STREAMING; RESUMING after a drop, within its resume window. */
  state: z.enum(['WAITING', 'GRANTED', 'STREAMING', 'RESUMING']),
  subject: sessionSubjectSchema,
  /** When it asked for a session (joined the line). */
  joinedAt: z.string(),
  /** 1-based place in the function's line, while WAITING. */
  position: z.number().int().positive().optional(),
  instanceId: z.string().optional(),
  /** The version whose instance it holds (a session that named only the function may wait for any of them). */
  versionId: z.string().optional(),
  grantedAt: z.string().optional(),
  /** When its browser first connected. */
  connectedAt: z.string().optional(),
  /** While RESUMING: when its instance is given up unless the browser comes back. */
  resumeBy: z.string().optional(),
}).meta({ id: 'StreamingSession' });

export const sessionsResponse = z.object({ sessions: z.array(streamingSessionSchema) });

export type SessionSubject = z.infer<typeof sessionSubjectSchema>;
export type StreamingSession = z.infer<typeof streamingSessionSchema>;

/** Where the sessions are: the broker (the replica that runs placement), or a relay to it. */
export interface SessionSource {
  sessionsOf(versionId: string): Promise<StreamingSession[]>;
}

export function createSessionListing(options: { functions: Pick<FunctionsService, 'get'>; source?: SessionSource }) {
  return {
    /** The version's sessions; 404 when the account has no such version, none for a function that does not stream. */
    async list(principal: Principal, functionId: string, versionId: string): Promise<StreamingSession[]> {
      const fn = await options.functions.get(principal, functionId, versionId);
      if (fn.functionType !== 'STREAMING') return [];
      if (!options.source) {
        throw new Problem('service-unavailable', 'This API replica neither runs placement, which brokers streaming sessions, nor reaches it over NATS; ask the one that does');
      }
      return options.source.sessionsOf(fn.versionId);
    },
  };
}

export type SessionListing = ReturnType<typeof createSessionListing>;
