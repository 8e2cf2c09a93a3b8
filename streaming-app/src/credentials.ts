// STUN/TURN access details posted by the platform to /v1/streaming/creds (spec §2.4), kept in memory
// only and turned into the ICE servers of the next peer connection.
import { isIP } from 'node:net';
import { z } from 'zod';

export const credentialsSchema = z.object({
  stunIp: z.string().refine((v) => isIP(v) !== 0, 'must be an IPv4 or IPv6 address'),
  stunPort: z.number().int().min(1).max(65535),
  username: z.string().min(1).max(512),
  password: z.string().min(1).max(512),
}).strict();

export type Credentials = z.infer<typeof credentialsSchema>;

export type IceServer = { urls: string; username?: string; credential?: string };

/**
 * The platform runs one server for both roles (coturn answers STUN binding requests too), so the same
 * address gives a server-reflexive candidate (stun:) and a relayed one (turn:, long-term credentials).
 * Without credentials the list is empty: host candidates only, never a public default STUN server.
 */
export function iceServersFor(creds: Credentials | undefined): IceServer[] {
  if (!creds) return [];
  const host = isIP(creds.stunIp) === 6 ? `[${creds.stunIp}]` : creds.stunIp;
  return [
    { urls: `stun:${host}:${creds.stunPort}` },
    { urls: `turn:${host}:${creds.stunPort}?transport=udp`, username: creds.username, credential: creds.password },
  ];
}

/** Latest credentials; each POST replaces the previous ones (they are short-lived REST credentials). */
export class CredentialStore {
  #current: Credentials | undefined;
  #receivedAt = 0;

  set(creds: Credentials): void {
    this.#current = creds;
    this.#receivedAt = Date.now();
  }

  get current(): Credentials | undefined {
    return this.#current;
  }

  get receivedAt(): number {
    return this.#receivedAt;
  }
}
