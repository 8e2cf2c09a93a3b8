import type { IncomingMessage } from 'node:http';

/** True for an address or name of this machine's loopback only (127.0.0.0/8, ::1, localhost). */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** The name in a Host header, lower case, without its port (an IPv6 literal keeps its brackets). */
export function hostnameOf(hostHeader: string | undefined): string {
  if (!hostHeader) return '';
  const host = hostHeader.toLowerCase();
  if (host.startsWith('[')) return host.slice(0, host.indexOf(']') + 1);
  const colon = host.lastIndexOf(':');
  return colon === -1 ? host : host.slice(0, colon);
}

/**
 * `path` as an absolute URL on the host the client reached, for URLs handed to it (a signed upload URL,
 * a large result's Location). A TLS-terminating proxy in front says its scheme in X-Forwarded-Proto.
 */
export function absoluteUrl(req: IncomingMessage, path: string): string {
  const forwarded = req.headers['x-forwarded-proto'];
  const scheme = forwarded === 'https' || forwarded === 'http' ? forwarded : 'encrypted' in req.socket ? 'https' : 'http';
  return `${scheme}://${req.headers.host ?? 'localhost'}${path}`;
}
