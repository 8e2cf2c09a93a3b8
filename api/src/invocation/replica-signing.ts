// What replicas tell each other over NATS about where a request goes (a version's ready instances, a
// grant of a slot, a request's assets to stage) carries an HMAC-SHA256 under a key all replicas share (a
// sealed secret of the installation in the store), so a client that can write to the NATS server cannot
// point a replica at an endpoint of its own. A signed message is `<mac>.<JSON>`; the MAC covers what the
// message is about (its context: the version, the receiving replica) as well as the JSON, so one cannot
// be replayed as another.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { NatsConnection } from '@nats-io/transport-node';

const MAC_LENGTH = 43;

export interface ReplicaSigner {
  /** `value` as JSON, signed for `context`. */
  sign(context: string, value: unknown): string;
  /** What a message signed for `context` holds (undefined if it is no JSON); undefined when it was not signed so. */
  open(context: string, signed: string): { value: unknown } | undefined;
}

/** Replicas asking each other over NATS: their connection, the installation's subject for the exchange, their shared signer. */
export interface ReplicaLink {
  nc: NatsConnection;
  subject: string;
  signer: ReplicaSigner;
}

/** The installation's NATS exchanges between replicas (absent without NATS). */
export interface ReplicaLinks {
  replicaId: string;
  stage: ReplicaLink;
  logs: ReplicaLink;
  sessions: ReplicaLink;
  agents: ReplicaLink;
}

export function createReplicaSigner(key: string): ReplicaSigner {
  const mac = (context: string, text: string) => createHmac('sha256', key).update(context).update('\n').update(text).digest();
  return {
    sign(context, value) {
      const text = JSON.stringify(value);
      return `${mac(context, text).toString('base64url')}.${text}`;
    },
    open(context, signed) {
      if (signed[MAC_LENGTH] !== '.') return undefined;
      const text = signed.slice(MAC_LENGTH + 1);
      const given = Buffer.from(signed.slice(0, MAC_LENGTH), 'base64url');
      const expected = mac(context, text);
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
      try {
        return { value: JSON.parse(text) };
      } catch {
        return { value: undefined };
      }
    },
  };
}
