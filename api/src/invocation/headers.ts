// What crosses between client and container (wire-reference 5): client headers minus hop-by-hop ones,
// the platform's credential and any SVC-* the client sent; the SVC-* headers the platform adds.
import type { IncomingHttpHeaders } from 'node:http';

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'trailers',
  'transfer-encoding', 'upgrade', 'host', 'content-length',
]);

/** Client headers that go to the container. The bearer is ours, not the function's, so it stays here. */
export function forwardedRequestHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const forwarded: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || name === 'authorization' || name.startsWith('svc-')) continue;
    forwarded[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  forwarded['content-type'] ??= 'application/json';
  return forwarded;
}

/** Container response headers that go to the client. */
export function forwardedResponseHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const forwarded: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name) && !name.startsWith('svc-')) forwarded[name] = value;
  }
  return forwarded;
}

/** SVC-STATUS as the reference sets it. */
export function svcStatus(status: number): 'in-progress' | 'fulfilled' | 'errored' {
  if (status === 202) return 'in-progress';
  return status >= 200 && status < 400 ? 'fulfilled' : 'errored';
}
