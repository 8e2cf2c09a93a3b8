// What the platform receives (spec §4.7 item 3): the browser's request with its own credential items
// taken out, and the proxy's bearer key, the function id (and version) and the platform's Host put in.
import type { IncomingMessage } from 'node:http';
import type { Cookie } from 'tough-cookie';
import { TOKEN_COOKIE, TOKEN_QUERY_PARAMETER, type PresentedToken } from './auth.ts';
import type { ProxyConfig } from './config.ts';
import { cookieHeaderWithout, parseCookieHeader } from './cookies.ts';
import { Problem } from './problem.ts';
import { ITEM, isPlatformItem, itemValue, parseSubprotocols } from './subprotocols.ts';

/** Headers a browser could use to pick its own credential or function; the proxy decides both. */
const BROWSER_HEADERS_REPLACED = ['authorization', 'svc-function-id', 'function-id', 'svc-function-version-id', 'function-version-id'];

export interface InspectedRequest {
  /** Sec-WebSocket-Protocol items as offered by the browser. */
  subprotocols: string[];
  cookies: Cookie[];
  token?: PresentedToken;
}

export function inspectRequest(req: IncomingMessage): InspectedRequest {
  const subprotocols = parseSubprotocols(req.headers['sec-websocket-protocol']);
  const cookies = parseCookieHeader(req.headers.cookie);
  return { subprotocols, cookies, token: findToken(req.url ?? '/', subprotocols, cookies) };
}

function findToken(url: string, subprotocols: string[], cookies: Cookie[]): PresentedToken | undefined {
  const fromProtocol = itemValue(subprotocols, ITEM.userToken);
  if (fromProtocol) return { value: fromProtocol, source: 'subprotocol' };
  const fromCookie = cookies.find((cookie) => cookie.key === TOKEN_COOKIE)?.value;
  if (fromCookie) return { value: fromCookie, source: 'cookie' };
  const query = url.indexOf('?');
  const fromQuery = query === -1 ? null : new URLSearchParams(url.slice(query + 1)).get(TOKEN_QUERY_PARAMETER);
  if (fromQuery) return { value: fromQuery, source: 'query' };
  return undefined;
}

/**
 * Rewrites `req` in place for forwarding and returns the headers the proxy sets on top of it.
 * A function-id item naming another function is refused: this proxy serves one function.
 */
export function rewriteForUpstream(req: IncomingMessage, inspected: InspectedRequest, config: ProxyConfig): Record<string, string> {
  const requestedFunction = itemValue(inspected.subprotocols, ITEM.functionId);
  if (requestedFunction !== undefined && requestedFunction !== config.functionId) {
    throw new Problem('forbidden', `this proxy serves function ${config.functionId}, not ${requestedFunction}`);
  }

  for (const name of BROWSER_HEADERS_REPLACED) delete req.headers[name];

  const forwardedProtocols = inspected.subprotocols.filter((item) => !isPlatformItem(item));
  if (forwardedProtocols.length > 0) req.headers['sec-websocket-protocol'] = forwardedProtocols.join(', ');
  else delete req.headers['sec-websocket-protocol'];

  if (inspected.cookies.some((cookie) => cookie.key === TOKEN_COOKIE)) {
    const rest = cookieHeaderWithout(inspected.cookies, [TOKEN_COOKIE]);
    if (rest) req.headers.cookie = rest;
    else delete req.headers.cookie;
  }

  req.url = withoutQueryParameter(req.url ?? '/', TOKEN_QUERY_PARAMETER);

  const headers: Record<string, string> = {
    host: config.upstream.host,
    authorization: `Bearer ${config.apiKey}`,
    'svc-function-id': config.functionId,
  };
  if (config.functionVersionId) headers['svc-function-version-id'] = config.functionVersionId;
  return headers;
}

function withoutQueryParameter(url: string, name: string): string {
  const mark = url.indexOf('?');
  if (mark === -1) return url;
  const query = new URLSearchParams(url.slice(mark + 1));
  if (!query.has(name)) return url;
  query.delete(name);
  const rest = query.toString();
  return url.slice(0, mark) + (rest ? `?${rest}` : '');
}
