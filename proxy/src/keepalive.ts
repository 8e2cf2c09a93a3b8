// Keeps WebSocket tunnels alive (spec §4.7 item 5). The platform ends a streaming session when its
// connection ends, so an idle signaling socket must not be cut by the proxy, a NAT or a load balancer.
// One sweep every PROXY_PING_INTERVAL_MS pings each side that was silent during the last interval;
// live peers answer with a pong (forwarded to the other side, where RFC 6455 lets an unsolicited pong
// be ignored). A side silent for its whole timeout (client 7 s, server 7 s) is gone: the tunnel is
// aborted, which the platform sees as a lost connection and keeps the session for a resume.
import type { TimeoutConfig } from './config.ts';
import type { Relay, RelaySide } from './relay.ts';

export class Keepalive {
  readonly #relays = new Set<Relay>();
  readonly #timeouts: TimeoutConfig;
  readonly #onSilent: (relay: Relay, side: RelaySide) => void;
  #timer: NodeJS.Timeout | undefined;

  constructor(timeouts: TimeoutConfig, onSilent: (relay: Relay, side: RelaySide) => void) {
    this.#timeouts = timeouts;
    this.#onSilent = onSilent;
  }

  get size(): number {
    return this.#relays.size;
  }

  watch(relay: Relay): void {
    this.#relays.add(relay);
    relay.browser.once('close', () => this.#relays.delete(relay));
    this.#timer ??= setInterval(() => this.sweep(), this.#timeouts.pingIntervalMs).unref();
  }

  sweep(): void {
    const interval = this.#timeouts.pingIntervalMs;
    for (const relay of this.#relays) {
      relay.browserSilentMs = relay.heardFromBrowser ? 0 : relay.browserSilentMs + interval;
      relay.upstreamSilentMs = relay.heardFromUpstream ? 0 : relay.upstreamSilentMs + interval;
      relay.heardFromBrowser = false;
      relay.heardFromUpstream = false;
      if (relay.browserSilentMs >= this.#timeouts.clientMs) {
        this.#drop(relay, 'browser');
        continue;
      }
      if (relay.upstreamSilentMs >= this.#timeouts.serverMs) {
        this.#drop(relay, 'platform');
        continue;
      }
      if (relay.browserSilentMs > 0) relay.pingBrowser();
      if (relay.upstreamSilentMs > 0) relay.pingUpstream();
    }
    if (this.#relays.size === 0) this.stop();
  }

  #drop(relay: Relay, side: RelaySide): void {
    this.#relays.delete(relay);
    this.#onSilent(relay, side);
    relay.abort();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
