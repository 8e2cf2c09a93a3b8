// What a streaming request names, wherever a client could put it (wire-reference 9): the bearer, the
// function (and version), and the session it continues. Browsers can set no header on a WebSocket but
// Sec-WebSocket-Protocol, so those may come as `name.value` items; the session may also come as the
// `svc-reqid` query parameter, which a browser tab can set for its own session where the shared
// `svc-request-id` cookie would name another tab's.
import type { IncomingMessage } from 'node:http';
import { Problem } from '../domain/problem.ts';

export const SESSION_COOKIE = 'svc-request-id';
export const SESSION_HEADER = 'svc-reqid';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Sec-WebSocket-Protocol items that carry what a browser cannot put in headers; never passed on. */
const PLATFORM_ITEMS = ['authorization.', 'function-id.', 'function-version-id.'];

export interface Named {
  /** Sec-WebSocket-Protocol items as offered. */
  items: string[];
  /** An Authorization header value, from the header or an `authorization.<key>` item (`Bearer ` optional there). */
  authorization?: string;
  functionId?: string;
  versionId?: string;
  /** The session continued: header or query (explicit), else the cookie (shared by a browser's tabs). */
  session?: { id: string; explicit: boolean };
}

/** The reference's sign-in requests carry `X-SVC-ABSORB: true` (its docs and clients); `SVC-ABSORB` is accepted too. */
export function isSignIn(req: IncomingMessage): boolean {
  const flag = req.headers['x-svc-absorb'] ?? req.headers['svc-absorb'];
  return typeof flag === 'string' && flag.toLowerCase() === 'true';
}

export function namedBy(req: IncomingMessage): Named {
  const items = (req.headers['sec-websocket-protocol'] ?? '').split(',').map((item) => item.trim()).filter(Boolean);
  const item = (prefix: string) => items.find((candidate) => candidate.toLowerCase().startsWith(prefix))?.slice(prefix.length);
  const header = (...names: string[]) => names.map((name) => req.headers[name]).find((value): value is string => typeof value === 'string' && value !== '');
  const fromItem = item('authorization.')?.replace(/^Bearer\s+/i, '');
  const explicit = header(SESSION_HEADER) ?? new URL(req.url ?? '/', 'http://x').searchParams.get(SESSION_HEADER) ?? undefined;
  const cookie = cookieOf(req, SESSION_COOKIE);
  return {
    items,
    authorization: header('authorization') ?? (fromItem ? `Bearer ${fromItem}` : undefined),
    functionId: header('svc-function-id', 'function-id') ?? item('function-id.'),
    versionId: header('svc-function-version-id', 'function-version-id') ?? item('function-version-id.'),
    session: explicit ? { id: explicit, explicit: true } : cookie ? { id: cookie, explicit: false } : undefined,
  };
}

/** The function (and version) a new session is for; 400 naming what is missing or malformed. */
export function targetOf(named: Named): { functionId: string; versionId?: string } {
  const { functionId, versionId } = named;
  if (!functionId || !UUID.test(functionId)) {
    throw new Problem('bad-request', 'A streaming session needs the function id: header svc-function-id (or function-id), or a function-id.<uuid> subprotocol item');
  }
  if (versionId && !UUID.test(versionId)) throw new Problem('bad-request', 'svc-function-version-id must be a function version id (UUID)');
  return { functionId, versionId };
}

/** The items the container may see: the application's own, never the platform's. */
export function applicationItems(items: string[]): string[] {
  return items.filter((item) => !PLATFORM_ITEMS.some((prefix) => item.toLowerCase().startsWith(prefix)));
}

function cookieOf(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name && value.length) return value.join('=');
  }
  return undefined;
}
