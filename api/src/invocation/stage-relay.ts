// Input assets with several API replicas: agents link only to the replica that runs placement, so the
// others ask it over NATS (request/reply on <prefix>.stage) to have a request's assets put in place. One
// schema for the ask and one for the answer, decoded at both ends. An ask names an instance and the assets
// to put there, so it is signed (replica-signing.ts): one from a client that is no replica is refused.
import type { Msg } from '@nats-io/transport-node';
import { z } from 'zod';
import type { Logger } from '../logger.ts';
import type { ReplicaLink } from './replica-signing.ts';

/** What a signed ask is about. */
const CONTEXT = 'stage';
/** The placement replica's own limit is 120 s (control/agents/staging.ts); this waits a little longer. */
const ASK_TIMEOUT_MS = 125_000;

const askSchema = z.object({
  clusterId: z.string(),
  requestId: z.string(),
  instanceId: z.string(),
  assets: z.array(z.object({ assetId: z.string(), path: z.string() })),
});
const answerSchema = z.object({ error: z.string().optional() });

export type StageAsk = z.infer<typeof askSchema>;

function jsonOf(msg: Msg): unknown {
  try {
    return msg.json();
  } catch {
    return undefined;
  }
}

/** On the placement replica: stages what the others ask for with `stage` (its agent hub). */
export function serveStaging(link: ReplicaLink, stage: (ask: StageAsk) => Promise<void>, log: Logger) {
  const answer = (msg: Msg, error?: string) => {
    msg.respond(JSON.stringify(error ? { error } : {}));
  };
  return link.nc.subscribe(link.subject, {
    callback: (error, msg) => {
      if (error) return log.warn({ err: error }, 'staging relay subscription failed');
      const opened = link.signer.open(CONTEXT, msg.string());
      if (!opened) {
        log.warn({ subject: msg.subject }, 'a staging request not signed by a replica; refused');
        return answer(msg, 'the staging request is not signed by a replica of this installation');
      }
      const ask = askSchema.safeParse(opened.value);
      if (!ask.success) answer(msg, 'the staging request does not decode');
      else stage(ask.data).then(() => answer(msg), (failed: Error) => answer(msg, failed.message));
    },
  });
}

/** On the other replicas: asks the placement replica. */
export function relayStaging(link: ReplicaLink) {
  return async (ask: StageAsk): Promise<void> => {
    let reply: Msg;
    try {
      reply = await link.nc.request(link.subject, link.signer.sign(CONTEXT, ask), { timeout: ASK_TIMEOUT_MS });
    } catch (error) {
      throw new Error(`the placement replica did not answer (${(error as Error).message})`);
    }
    const answer = answerSchema.safeParse(jsonOf(reply));
    if (!answer.success) throw new Error('the placement replica answered something that does not decode');
    if (answer.data.error) throw new Error(answer.data.error);
  };
}
