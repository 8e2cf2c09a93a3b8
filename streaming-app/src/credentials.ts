// STUN/TURN access details posted by the platform to /v1/streaming/creds (spec §2.4), kept in memory
// only and turned into the ICE servers of the next peer connection.
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
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

const LOOPBACK_PROBE_MS = 300;
const isLoopback = (ip: string): boolean => ip === '::1' || ip.startsWith('127.');

/**
 * Whether a STUN server answers a binding request (RFC 8489: type 0x0001, no attributes) within `timeoutMs`.
 * Any datagram back counts; an ICMP port unreachable surfaces as a socket error and counts as no.
 */
export function stunAnswers(ip: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createSocket(isIP(ip) === 6 ? 'udp6' : 'udp4');
    const finish = (answered: boolean): void => {
      clearTimeout(timer);
      socket.close();
      resolve(answered);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.on('message', () => finish(true));
    socket.on('error', () => finish(false));
    const request = Buffer.concat([Buffer.from([0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xa4, 0x42]), randomBytes(12)]);
    socket.send(request, port, ip);
  });
}

/** Latest credentials; each POST replaces the previous ones (they are short-lived REST credentials). */
export class CredentialStore {
  #current: Credentials | undefined;
  #receivedAt = 0;
  #usable: Promise<Credentials | undefined> = Promise.resolve(undefined);

  set(creds: Credentials): void {
    this.#current = creds;
    this.#receivedAt = Date.now();
    this.#usable = usableCredentials(creds);
  }

  /**
   * The credentials the app's own peer connection should use. A server on a loopback address is only
   * there if this app shares the platform's network namespace; in a container 127.0.0.1 is the container
   * itself, and werift would hold the answer (and so the first frame) for seconds trying to reach it.
   * So a loopback server must answer one binding request first (checked once, as the creds arrive).
   */
  usable(): Promise<Credentials | undefined> {
    return this.#usable;
  }

  get current(): Credentials | undefined {
    return this.#current;
  }

  get receivedAt(): number {
    return this.#receivedAt;
  }
}

async function usableCredentials(creds: Credentials): Promise<Credentials | undefined> {
  if (!isLoopback(creds.stunIp)) return creds;
  return (await stunAnswers(creds.stunIp, creds.stunPort, LOOPBACK_PROBE_MS)) ? creds : undefined;
}
