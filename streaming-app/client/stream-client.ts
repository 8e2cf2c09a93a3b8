// Signaling and the browser's peer connection. The app offers; this side answers, trickles candidates,
// keeps the WebSocket alive with pings and, when the socket drops, reconnects with the session's resume
// token so the same session (and usually the same, still flowing, peer connection) continues.
import type { AppStatsMessage, ClientMessage, IceCandidateJson, ServerMessage } from './protocol.ts';
import { CloseCode, FINAL_CLOSE_CODES, INPUT_CHANNEL_LABEL, PROTOCOL_VERSION } from './protocol.ts';

type ConfigMessage = Extract<ServerMessage, { type: 'config' }>;

export type StreamClientOptions = {
  signalUrl: string;
  /** iceTransportPolicy "relay": only TURN-relayed paths (for restrictive networks and for testing). */
  relayOnly: boolean;
  onVideo(stream: MediaStream, receiver: RTCRtpReceiver): void;
  /** The app's sound (an Opus track), when it has any. Playing it needs a user gesture in most browsers. */
  onAudio?(stream: MediaStream, receiver: RTCRtpReceiver): void;
  onStatus(status: string): void;
  onConfig?(config: ConfigMessage): void;
  onAppStats?(stats: AppStatsMessage): void;
  onInputChannel?(channel: RTCDataChannel | undefined): void;
  /** A new WebSocket is about to be opened (setup-time measurements start here). */
  onConnecting?(resuming: boolean): void;
  onEnded?(reason: string): void;
};

const RESUME_STORAGE_PREFIX = 'svc-stream-resume:';
const DEFAULT_KEEPALIVE_MS = 2000;
const MISSED_KEEPALIVES = 3;
const NEW_SESSION_ATTEMPTS = 5;

export class StreamClient {
  readonly #options: StreamClientOptions;
  #ws: WebSocket | undefined;
  #pc: RTCPeerConnection | undefined;
  #config: ConfigMessage | undefined;
  #resumeToken: string | undefined;
  #remoteApplied: Promise<void> = Promise.resolve();
  #pingTimer: ReturnType<typeof setInterval> | undefined;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #lastHeard = 0;
  #droppedAt = 0;
  #attempt = 0;
  #ended = false;
  /** Round trip of the last signaling ping, ms. */
  signalingRttMs: number | undefined;
  /** performance.now() of the setup milestones of the latest connection, to see where setup time goes. */
  readonly timeline: Record<string, number> = {};

  constructor(options: StreamClientOptions) {
    this.#options = options;
    // A reload within the resume window picks the session up again (with a new peer connection).
    this.#resumeToken = sessionStorage.getItem(RESUME_STORAGE_PREFIX + options.signalUrl) ?? undefined;
  }

  get peerConnection(): RTCPeerConnection | undefined {
    return this.#pc;
  }

  get config(): ConfigMessage | undefined {
    return this.#config;
  }

  connect(): void {
    if (this.#ended) return;
    const resuming = this.#resumeToken !== undefined;
    this.#options.onConnecting?.(resuming);
    this.#options.onStatus(resuming ? 'reconnecting…' : 'connecting…');
    for (const key of Object.keys(this.timeline)) delete this.timeline[key];
    this.timeline.connect = performance.now();
    if (resuming) this.#open(true);
    else void this.#reserve().then(() => this.#open(false));
  }

  /**
   * Behind the platform, a new session is reserved first with a plain request (the reference's sign-in:
   * POST with SVC-ABSORB), whose cookie the WebSocket then carries; it also replaces a stale session cookie,
   * which a browser would keep if only a refused WebSocket handshake tried to clear it. A container
   * reached directly has no such endpoint, and the answer is ignored.
   */
  async #reserve(): Promise<void> {
    const url = new URL(this.#options.signalUrl);
    url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
    await fetch(url, { method: 'POST', headers: { 'svc-absorb': 'true' }, credentials: 'include' }).catch(() => undefined);
    this.timeline.reserved = performance.now();
  }

  #open(resuming: boolean): void {
    if (this.#ended) return;
    const ws = new WebSocket(this.#options.signalUrl);
    this.#ws = ws;
    ws.onopen = () => {
      this.#lastHeard = performance.now();
      this.timeline.open = this.#lastHeard;
      const hasPeer = this.#pc !== undefined && !['failed', 'closed'].includes(this.#pc.connectionState);
      this.#send(resuming ? { type: 'hello', protocol: PROTOCOL_VERSION, resumeToken: this.#resumeToken, hasPeer } : { type: 'hello', protocol: PROTOCOL_VERSION });
      this.#startKeepalive();
    };
    ws.onmessage = (event) => {
      this.#lastHeard = performance.now();
      let message: ServerMessage;
      try {
        message = JSON.parse(String(event.data)) as ServerMessage;
      } catch {
        return;
      }
      this.#handle(message);
    };
    ws.onclose = (event) => {
      if (ws !== this.#ws) return;
      this.#socketGone(event.code, event.reason, resuming);
    };
  }

  /** Ends the session on purpose: the app stops at once instead of waiting for a resume. */
  bye(reason = 'user left'): void {
    this.#send({ type: 'bye', reason });
    this.#finish(`you ended the session (${reason})`);
  }

  /** Drops the WebSocket without a bye, as a network failure would (for testing resume). */
  dropSocket(): void {
    this.#ws?.close(4000, 'dropped by client');
  }

  #send(message: ClientMessage): void {
    if (this.#ws?.readyState === WebSocket.OPEN) this.#ws.send(JSON.stringify(message));
  }

  #startKeepalive(): void {
    if (this.#pingTimer) clearInterval(this.#pingTimer);
    const interval = this.#config?.keepaliveMs ?? DEFAULT_KEEPALIVE_MS;
    this.#pingTimer = setInterval(() => {
      if (performance.now() - this.#lastHeard > interval * MISSED_KEEPALIVES) {
        // No pong for several intervals: the path is dead even if the socket has not noticed yet.
        const ws = this.#ws;
        this.#ws = undefined;
        ws?.close();
        this.#socketGone(1006, 'keepalive timeout', true);
        return;
      }
      this.#send({ type: 'ping', t: performance.now() });
    }, interval);
  }

  #handle(message: ServerMessage): void {
    switch (message.type) {
      case 'config':
        this.timeline.config = performance.now();
        this.#config = message;
        this.#resumeToken = message.resumeToken;
        sessionStorage.setItem(RESUME_STORAGE_PREFIX + this.#options.signalUrl, message.resumeToken);
        this.#attempt = 0;
        this.#startKeepalive();
        this.#options.onConfig?.(message);
        this.#options.onStatus(message.resumed ? 'resumed' : 'negotiating…');
        return;
      case 'offer':
        this.timeline.offer = performance.now();
        this.#answer(message.sdp);
        return;
      case 'candidate':
        this.#addCandidate(message.candidate);
        return;
      case 'pong':
        this.signalingRttMs = performance.now() - message.t;
        return;
      case 'bye':
        this.#finish(`session ended by the app: ${message.reason}`);
        return;
      case 'error':
        this.#options.onStatus(`app error: ${message.message}`);
        return;
    }
  }

  #answer(sdp: string): void {
    // Every offer is for a new peer connection (first one, restart, or resume after a reload).
    this.#pc?.close();
    this.#options.onInputChannel?.(undefined);
    const pc = new RTCPeerConnection({
      // Exactly what the app handed over: its STUN/TURN server or nothing, never a public default.
      iceServers: this.#config?.iceServers ?? [],
      iceTransportPolicy: this.#options.relayOnly ? 'relay' : 'all',
      bundlePolicy: 'max-bundle',
    });
    this.#pc = pc;
    pc.ontrack = (event) => {
      if (event.track.kind === 'audio') {
        this.#options.onAudio?.(new MediaStream([event.track]), event.receiver);
        return;
      }
      this.timeline.track = performance.now();
      // No extra buffering: render each frame as soon as it is decoded.
      const receiver = event.receiver as RTCRtpReceiver & { playoutDelayHint?: number; jitterBufferTarget?: number };
      receiver.jitterBufferTarget = 0;
      receiver.playoutDelayHint = 0;
      this.#options.onVideo(event.streams[0] ?? new MediaStream([event.track]), event.receiver);
    };
    pc.ondatachannel = (event) => {
      const channel = event.channel;
      if (channel.label !== INPUT_CHANNEL_LABEL) return;
      channel.onopen = () => this.#options.onInputChannel?.(channel);
      channel.onclose = () => { if (pc === this.#pc) this.#options.onInputChannel?.(undefined); };
      channel.onmessage = (e) => {
        try {
          const message = JSON.parse(String(e.data)) as AppStatsMessage;
          if (message.type === 'stats') this.#options.onAppStats?.(message);
        } catch { /* not ours */ }
      };
    };
    pc.onicecandidate = (event) => {
      if (pc !== this.#pc) return;
      this.#send({ type: 'candidate', candidate: event.candidate ? (event.candidate.toJSON() as IceCandidateJson) : null });
    };
    pc.oniceconnectionstatechange = () => {
      if (pc === this.#pc) this.timeline[`ice-${pc.iceConnectionState}`] ??= performance.now();
    };
    pc.onconnectionstatechange = () => {
      if (pc !== this.#pc) return;
      this.timeline[`peer-${pc.connectionState}`] ??= performance.now();
      this.#options.onStatus(`peer ${pc.connectionState}`);
      // A failed path with the app still reachable: ask for a fresh peer connection.
      if (pc.connectionState === 'failed') this.#send({ type: 'restart' });
    };
    this.#remoteApplied = pc.setRemoteDescription({ type: 'offer', sdp }).then(async () => {
      const answer = await pc.createAnswer();
      await pc.setLocalDescription(answer);
      this.#send({ type: 'answer', sdp: answer.sdp ?? '' });
      this.timeline.answer = performance.now();
    });
    this.#remoteApplied.catch((error: unknown) => this.#options.onStatus(`negotiation failed: ${String(error)}`));
  }

  #addCandidate(candidate: IceCandidateJson | null): void {
    const pc = this.#pc;
    if (!pc) return;
    this.#remoteApplied
      .then(() => pc.addIceCandidate(candidate ?? undefined))
      .catch(() => { /* a candidate this browser cannot use (e.g. wrong family) is not an error */ });
  }

  #socketGone(code: number, reason: string, hadToken: boolean): void {
    if (this.#pingTimer) clearInterval(this.#pingTimer);
    this.#pingTimer = undefined;
    this.#ws = undefined;
    if (this.#ended) return;
    if (code === CloseCode.badResumeToken && hadToken) {
      // The stored token belongs to a session that is gone: start a new one instead.
      this.#forgetToken();
      this.#pc?.close();
      this.#pc = undefined;
      this.connect();
      return;
    }
    if (FINAL_CLOSE_CODES.includes(code) || code === CloseCode.goingAway) {
      this.#finish(`signaling closed: ${reason || code}`);
      return;
    }
    if (this.#resumeToken === undefined) {
      // A new session may be refused for a moment (every instance busy, a stale session cookie that the
      // refusal just cleared): try a few times before giving up.
      if (this.#attempt >= NEW_SESSION_ATTEMPTS) {
        this.#finish(`could not reach the app (${code}${reason ? `: ${reason}` : ''})`);
        return;
      }
      const delay = 250 * 2 ** this.#attempt++;
      this.#options.onStatus(`could not connect (${code}); retrying in ${delay} ms`);
      this.#reconnectTimer = setTimeout(() => this.connect(), delay);
      return;
    }
    // Keep trying within the resume window the app announced; back off up to 2 s between attempts.
    if (this.#droppedAt === 0 || this.#attempt === 0) this.#droppedAt = performance.now();
    const windowMs = this.#config?.resumeWindowMs ?? 60_000;
    if (performance.now() - this.#droppedAt > windowMs) {
      this.#finish('could not resume the session in time');
      return;
    }
    const delay = Math.min(2000, 100 * 2 ** this.#attempt);
    this.#attempt++;
    this.#options.onStatus(`signaling lost (${code}); reconnecting in ${delay} ms`);
    this.#reconnectTimer = setTimeout(() => this.connect(), delay);
  }

  #forgetToken(): void {
    this.#resumeToken = undefined;
    sessionStorage.removeItem(RESUME_STORAGE_PREFIX + this.#options.signalUrl);
  }

  #finish(reason: string): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#forgetToken();
    if (this.#pingTimer) clearInterval(this.#pingTimer);
    if (this.#reconnectTimer) clearTimeout(this.#reconnectTimer);
    const ws = this.#ws;
    this.#ws = undefined;
    // Let a queued bye leave before closing.
    if (ws) setTimeout(() => ws.close(1000), 50);
    this.#pc?.close();
    this.#options.onStatus(reason);
    this.#options.onEnded?.(reason);
  }
}
