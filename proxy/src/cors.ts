// CORS: the three headers of spec §4.7 go on every response the proxy sends, whether it comes from the
// platform, from the proxy itself (errors, client files) or answers a preflight.
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';

export const CORS_HEADERS = {
  'access-control-allow-origin': '*',
  'access-control-allow-headers': '*',
  'access-control-expose-headers': '*',
} as const;

/** Sets the CORS headers on a header map, replacing any the platform sent. */
export function applyCors(headers: OutgoingHttpHeaders | NodeJS.Dict<string | string[]>): void {
  for (const [name, value] of Object.entries(CORS_HEADERS)) headers[name] = value;
}

export function isPreflight(req: IncomingMessage): boolean {
  return req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined;
}

/** Preflights are answered here: they carry no credentials, so the platform could only refuse them. */
export function answerPreflight(res: ServerResponse): void {
  res.writeHead(204, {
    ...CORS_HEADERS,
    'access-control-allow-methods': 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS',
    'access-control-max-age': '600',
    'content-length': '0',
  });
  res.end();
}
