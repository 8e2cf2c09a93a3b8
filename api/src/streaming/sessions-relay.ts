// Streaming sessions with several API replicas: only the replica that runs placement knows the ready
// streaming instances, so only it brokers sessions (docs/scale-out.md); the others ask it for a version's
// sessions over NATS (request/reply on <prefix>.sessions). Both the ask and the answer are signed
// (replica-signing.ts), the answer for the ask's own id: a client that is no replica can neither ask for
// an account's sessions nor slip a list of its own into an answer.
import { randomUUID } from 'node:crypto';
import type { Msg, Subscription } from '@nats-io/transport-node';
import { z } from 'zod';
import { Problem } from '../domain/problem.ts';
import type { ReplicaLink } from '../invocation/replica-signing.ts';
import type { Logger } from '../logger.ts';
import { streamingSessionSchema, type SessionSource, type StreamingSession } from './sessions.ts';

const ASK = 'sessions-ask';
const ANSWER_TIMEOUT_MS = 5000;

const askSchema = z.object({ askId: z.string(), versionId: z.string() });
const answerSchema = z.object({ sessions: z.array(streamingSessionSchema) });

const answerContext = (askId: string) => `sessions-answer ${askId}`;

/** On the placement replica: answers the other replicas' asks from its broker. */
export function serveSessionAsks(link: ReplicaLink, sessionsOf: (versionId: string) => StreamingSession[], log: Logger): Subscription {
  return link.nc.subscribe(link.subject, {
    callback: (error, msg) => {
      if (error) return log.warn({ err: error }, 'sessions relay subscription failed');
      const opened = link.signer.open(ASK, msg.string());
      const ask = opened && askSchema.safeParse(opened.value);
      if (!ask?.success) return log.warn({ subject: msg.subject }, 'a sessions request not signed by a replica, or that does not decode; ignored');
      msg.respond(link.signer.sign(answerContext(ask.data.askId), { sessions: sessionsOf(ask.data.versionId) }));
    },
  });
}

/** On the other replicas: the placement replica's broker, asked over NATS. */
export function relaySessionAsks(link: ReplicaLink): SessionSource {
  return {
    async sessionsOf(versionId) {
      const askId = randomUUID();
      let reply: Msg;
      try {
        reply = await link.nc.request(link.subject, link.signer.sign(ASK, { askId, versionId }), { timeout: ANSWER_TIMEOUT_MS });
      } catch {
        throw new Problem('service-unavailable', 'The replica that runs placement, which brokers streaming sessions, did not answer in time; try again');
      }
      const opened = link.signer.open(answerContext(askId), reply.string());
      const answer = opened && answerSchema.safeParse(opened.value);
      if (!answer?.success) throw new Problem('service-unavailable', 'The answer for the streaming sessions was not signed by a replica of this installation');
      return answer.data.sessions;
    },
  };
}
