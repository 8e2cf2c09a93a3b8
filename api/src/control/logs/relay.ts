// Logs with several API replicas: agents link only to the replica that runs placement, so the others ask
// it over NATS. An ask (signed, on <prefix>.logs) names a subject of the asker's own, <prefix>.logs.<uuid>,
// on which the placement replica publishes signed answers: the merged kept lines in batches (the last
// `caughtUp`), then, following, new lines as its agents send them. A follower says it is still there on
// <subject>.alive every ALIVE_MS and ends with <subject>.stop; the placement replica stops by itself after
// 3 × ALIVE_MS without word. Signed both ways, so a NATS client that is no replica can neither ask for an
// account's lines nor slip lines into an answer.
import { randomUUID } from 'node:crypto';
import type { Subscription } from '@nats-io/transport-node';
import { z } from 'zod';
import { logLineSchema, type LogLine } from '../../compute/protocol.ts';
import { Problem } from '../../domain/problem.ts';
import type { ReplicaLink } from '../../invocation/replica-signing.ts';
import type { Logger } from '../../logger.ts';
import type { LogFollower, LogRelay, LogsQuery } from '../agents/logs.ts';

const ASK = 'logs-ask';
const ANSWER = 'logs-answer';
const ALIVE_MS = 10_000;
/** The placement replica waits up to 5 s for its agents; an answer later than this will not come. */
const ANSWER_TIMEOUT_MS = 15_000;
/** Lines per answer message, well under NATS's default 1 MiB payload at the agents' 8192 characters a line. */
const BATCH_LINES = 100;

const askSchema = z.object({
  clusterIds: z.array(z.string()),
  query: z.object({
    functionVersionId: z.string(), instanceId: z.string().optional(), since: z.string().optional(), tail: z.number().int().positive().optional(),
  }),
  follow: z.boolean(),
  subject: z.string(),
});
const answerSchema = z.object({ lines: z.array(logLineSchema), caughtUp: z.boolean().optional() });
type Answer = z.infer<typeof answerSchema>;

/** On the placement replica: answers the other replicas' asks with its agents' lines (`relay`, the agent hub's). */
export function serveLogAsks(link: ReplicaLink, relay: Pick<LogRelay, 'read' | 'follow'>, log: Logger): Subscription {
  return link.nc.subscribe(link.subject, {
    callback: (error, msg) => {
      if (error) return log.warn({ err: error }, 'logs relay subscription failed');
      const opened = link.signer.open(ASK, msg.string());
      const ask = opened && askSchema.safeParse(opened.value);
      if (!ask?.success) return log.warn({ subject: msg.subject }, 'a logs request not signed by a replica, or that does not decode; ignored');
      const { clusterIds, query, follow, subject } = ask.data;
      const send = (lines: LogLine[], caughtUp?: true) => {
        for (let at = 0; at === 0 || at < lines.length; at += BATCH_LINES) {
          const last = at + BATCH_LINES >= lines.length;
          link.nc.publish(subject, link.signer.sign(ANSWER, { lines: lines.slice(at, at + BATCH_LINES), ...(last && caughtUp ? { caughtUp } : {}) } satisfies Answer));
        }
      };
      if (!follow) return void relay.read(clusterIds, query).then((lines) => send(lines, true));
      followFor(link, subject, (follower) => relay.follow(clusterIds, query, follower), send);
    },
  });
}

/** Follows for an asker until it stops or goes quiet. */
function followFor(link: ReplicaLink, subject: string, follow: (follower: LogFollower) => () => void, send: (lines: LogLine[], caughtUp?: true) => void) {
  let heard = Date.now();
  const stop = follow({ onHistory: (lines) => send(lines, true), onLines: (lines) => send(lines) });
  const end = () => {
    clearInterval(watch);
    words.unsubscribe();
    stop();
  };
  const words = link.nc.subscribe(`${subject}.*`, {
    callback: (_error, msg) => {
      if (msg.subject.endsWith('.stop')) end();
      else heard = Date.now();
    },
  });
  const watch = setInterval(() => {
    if (Date.now() - heard > 3 * ALIVE_MS) end();
  }, ALIVE_MS);
}

/** On the other replicas: the agent hub's read and follow, asked of the placement replica. */
export function relayLogAsks(link: ReplicaLink): Pick<LogRelay, 'read' | 'follow'> {
  function ask(clusterIds: string[], query: LogsQuery, follow: boolean, onAnswer: (answer: Answer) => void): { subject: string; close(): void } {
    const subject = `${link.subject}.${randomUUID()}`;
    const answers = link.nc.subscribe(subject, {
      callback: (_error, msg) => {
        const opened = link.signer.open(ANSWER, msg.string());
        const answer = opened && answerSchema.safeParse(opened.value);
        if (answer?.success) onAnswer(answer.data);
      },
    });
    link.nc.publish(link.subject, link.signer.sign(ASK, { clusterIds, query, follow, subject }));
    return { subject, close: () => answers.unsubscribe() };
  }

  return {
    read(clusterIds, query) {
      return new Promise((resolve, reject) => {
        const lines: LogLine[] = [];
        const timer = setTimeout(() => {
          asked.close();
          reject(new Problem('service-unavailable', 'The replica that runs placement did not answer for the logs in time; try again'));
        }, ANSWER_TIMEOUT_MS);
        const asked = ask(clusterIds, query, false, (answer) => {
          lines.push(...answer.lines);
          if (!answer.caughtUp) return;
          clearTimeout(timer);
          asked.close();
          resolve(lines);
        });
      });
    },

    follow(clusterIds, query, follower) {
      let history: LogLine[] | undefined = [];
      const asked = ask(clusterIds, query, true, (answer) => {
        if (!history) return follower.onLines(answer.lines);
        history.push(...answer.lines);
        if (!answer.caughtUp) return;
        follower.onHistory(history);
        history = undefined;
      });
      const alive = setInterval(() => link.nc.publish(`${asked.subject}.alive`, ''), ALIVE_MS);
      return () => {
        clearInterval(alive);
        link.nc.publish(`${asked.subject}.stop`, '');
        asked.close();
      };
    },
  };
}
