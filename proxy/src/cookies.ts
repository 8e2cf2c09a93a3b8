// Cookie alignment (spec §4.7 item 6). The platform sets `svc-request-id` for its own host; a browser
// talking to the proxy would drop it or never send it back. The proxy rewrites every platform
// Set-Cookie to its own site: host-only (or PROXY_COOKIE_DOMAIN) and PROXY_COOKIE_PATH, with
// `SameSite=None; Secure` when browsers reach the proxy over TLS and `SameSite=Lax` otherwise
// (a Secure cookie from a plain-HTTP origin is refused). The browser then sends it back on reconnect,
// and the proxy forwards it unchanged.
import { Cookie } from 'tough-cookie';

export const REQUEST_ID_COOKIE = 'svc-request-id';

export interface CookiePolicy {
  secure: boolean;
  domain?: string;
  path: string;
}

export function alignSetCookies(setCookie: string | string[] | undefined, policy: CookiePolicy): string[] {
  if (setCookie === undefined) return [];
  const aligned: string[] = [];
  for (const header of Array.isArray(setCookie) ? setCookie : [setCookie]) {
    const cookie = Cookie.parse(header);
    if (!cookie) continue;
    cookie.domain = policy.domain ?? null;
    cookie.path = policy.path;
    cookie.secure = policy.secure;
    cookie.sameSite = policy.secure ? 'none' : 'lax';
    aligned.push(cookie.toString());
  }
  return aligned;
}

export function parseCookieHeader(header: string | undefined): Cookie[] {
  if (!header) return [];
  return header.split(';').flatMap((part) => {
    const cookie = part.trim() ? Cookie.parse(part, { loose: true }) : undefined;
    return cookie ? [cookie] : [];
  });
}

/** The Cookie header without the named cookies; undefined when nothing is left. */
export function cookieHeaderWithout(cookies: Cookie[], names: string[]): string | undefined {
  const kept = cookies.filter((cookie) => !names.includes(cookie.key));
  return kept.length > 0 ? kept.map((cookie) => cookie.cookieString()).join('; ') : undefined;
}
