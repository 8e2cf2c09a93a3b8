// Browsers can set no header on a WebSocket except Sec-WebSocket-Protocol, so clients put
// credentials and routing there as `name.value` items (`token.<jwt>`, `authorization.<key>`,
// `function-id.<uuid>`). The proxy consumes those items and forwards only the rest.

/** Items addressed to the proxy or the platform layer, never to the streaming application. */
export const ITEM = {
  userToken: 'token.',
  apiKey: 'authorization.',
  functionId: 'function-id.',
  functionVersionId: 'function-version-id.',
} as const;

export function parseSubprotocols(header: string | string[] | undefined): string[] {
  if (header === undefined) return [];
  const joined = Array.isArray(header) ? header.join(',') : header;
  return joined.split(',').map((item) => item.trim()).filter((item) => item !== '');
}

/** The value of the first item named `prefix` (`token.` → the JWT), if any. */
export function itemValue(items: string[], prefix: string): string | undefined {
  const item = items.find((candidate) => candidate.toLowerCase().startsWith(prefix));
  return item?.slice(prefix.length);
}

export function isPlatformItem(item: string): boolean {
  const lower = item.toLowerCase();
  return Object.values(ITEM).some((prefix) => lower.startsWith(prefix));
}

/**
 * The subprotocol the browser is told was selected. The platform's choice stands. When it chose none
 * but the browser offered items, Chrome fails the handshake ("Sent non-empty Sec-WebSocket-Protocol
 * header but no response was received"), so the proxy selects an offered routing item it consumed
 * (`function-id.…`), which carries no secret. Credential items are never echoed.
 */
export function selectedSubprotocol(upstreamChoice: string | undefined, offered: string[]): string | undefined {
  if (upstreamChoice) return upstreamChoice;
  return offered.find((item) => {
    const lower = item.toLowerCase();
    return lower.startsWith(ITEM.functionId) || lower.startsWith(ITEM.functionVersionId);
  });
}
