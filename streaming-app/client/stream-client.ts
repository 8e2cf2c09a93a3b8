// Signaling and the browser's peer connection. The app offers; this side answers, trickles candidates,
// keeps the WebSocket alive with pings and, when the socket drops, reconnects with the session's resume
// token so the same session (and usually the same, still flowing, peer connection) continues.
import { PictureHold } from './picture-hold.ts';
import type { AppStatsMessage, ClientMessage, IceCandidateJson, ServerMessage } from './protocol.ts';
import { CloseCode, FINAL_CLOSE_CODES, INPUT_CHANNEL_LABEL, PROTOCOL_VERSION } from './protocol.ts';

type ConfigMessage = Extract<ServerMessage, { type: 'config' }>;

/** Closes by which the app itself ended the session (as opposed to a failure on the way). */
const APP_ENDED_CODES: readonly number[] = [CloseCode.normal, CloseCode.goingAway, CloseCode.applicationExited];

/** Why a session did not start or is over, so the page can say what to do about it. */
export type EndCause = 'left' | 'app-ended' | 'sign-in' | 'forbidden' | 'not-found' | 'busy' | 'unreachable' | 'lost';

/** Where a person waiting for an instance stands (the platform's 202 answer to a sign-in). */
export type PlaceInLine = { position: number; estimatedWaitSeconds?: number };

export type StreamClientOptions = {
  signalUrl: string;
  /**
   * For a page that talks to the platform itself (the console) rather than through a proxy: headers for the
   * sign-in (Authorization, svc-function-id) and WebSocket subprotocol items (authorization.<key>,
   * function-id.<id>), the only place a browser can put them on a WebSocket.
   */
  platform?: { headers: Record<string, string>; protocols: string[] };
  /** iceTransportPolicy "relay": only TURN-relayed paths (for restrictive networks and for testing). */
  relayOnly: boolean;
  onVideo(stream: MediaStream, receiver: RTCRtpReceiver): void;
  /** The app's sound (an Opus track), when it has any. Playing it needs a user gesture in most browsers. */
  onAudio?(stream: MediaStream, receiver: RTCRtpReceiver): void;
  onStatus(status: string): void;
  onConfig?(config: ConfigMessage): void;
  onAppStats?(stats: AppStatsMessage): void;
  onInputChannel?(channel: RTCDataChannel | undefined): void;
  /** A new WebSocket is about to be opened, after any wait in line (setup-time measurements start here). */
  onConnecting?(resuming: boolean): void;
  /** Every instance is busy: this session waits in line and starts by itself. */
  onWaiting?(place: PlaceInLine): void;
  onEnded?(reason: string, cause: EndCause): void;
};

const DEFAULT_KEEPALIVE_MS = 2000;
const MISSED_KEEPALIVES = 3;
const NEW_SESSION_ATTEMPTS = 3;
/** Sign-in requests that fail at the network level before the platform counts as unreachable. */
const SIGN_IN_ATTEMPTS = 4;
/** The platform holds each sign-in up to a few seconds; answers faster than this are spaced out. */
const MIN_POLL_GAP_MS = 250;
const PLATFORM_PROBLEM = 'urn:svc:problem-details:';
const SESSION_ID = 'svc-reqid';

const causeOfStatus = (status: number): EndCause =>
  status === 401 ? 'sign-in' : status === 403 ? 'forbidden' : status === 404 ? 'not-found' : status === 429 || status === 503 ? 'busy' : 'unreachable';
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class StreamClient {
  readonly #options: StreamClientOptions;
  #ws: WebSocket | undefined;
  #pc: RTCPeerConnection | undefined;
  #config: ConfigMessage | undefined;
  #resumeToken: string | undefined;
  #remoteApplied: Promise<void> = Promise.resolve();
  #pingTimer: ReturnType<typeof setInterval> | undefined;
  /** Lip-sync's hold of the picture, when the app put picture and sound in one stream. */
  #pictureHold: PictureHold | undefined;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #lastHeard = 0;
  #droppedAt = 0;
  #attempt = 0;
  #ended = false;
  /** The platform's id of this session (svc-reqid); none when the app is reached directly. */
  #sessionId: string | undefined;
  readonly #signInUrl: string;
  readonly #polls = new AbortController();
  /** Round trip of the last signaling ping, ms. */
  signalingRttMs: number | undefined;
  /** performance.now() of the setup milestones of the latest connection, to see where setup time goes. */
  readonly timeline: Record<string, number> = {};

  constructor(options: StreamClientOptions) {
    this.#options = options;
    const url = new URL(options.signalUrl);
    url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
    this.#signInUrl = url.toString();
  }

  get peerConnection(): RTCPeerConnection | undefined {
    return this.#pc;
  }

  get config(): ConfigMessage | undefined {
    return this.#config;
  }

  /** The platform's id of this session (svc-reqid), once it signed in; undefined when the app is reached directly. */
  get sessionId(): string | undefined {
    return this.#sessionId;
  }

  connect(): void {
    if (this.#ended) return;
    const resuming = this.#resumeToken !== undefined;
    this.#options.onStatus(resuming ? 'reconnecting…' : 'connecting…');
    for (const key of Object.keys(this.timeline)) delete this.timeline[key];
    this.timeline.connect = performance.now();
    if (resuming) this.#open(true);
    else void this.#signIn().then((granted) => { if (granted) this.#open(false); });
  }

  /**
   * Behind the platform a session starts with the reference's sign-in (POST with X-SVC-ABSORB): 200 once
   * an instance is granted, 202 with the place in line until then (asked again at once: the platform holds
   * each answer a few seconds). Refusals end the session with their cause. A container reached directly
   * has no sign-in (its 404 is not the platform's problem type): then the WebSocket goes straight to it.
   */
  async #signIn(): Promise<boolean> {
    for (let failures = 0; !this.#ended;) {
      const sentAt = performance.now();
      let response: Response;
      try {
        const headers: Record<string, string> = {
          'x-svc-absorb': 'true', ...this.#options.platform?.headers, ...(this.#sessionId ? { [SESSION_ID]: this.#sessionId } : {}),
        };
        response = await fetch(this.#signInUrl, { method: 'POST', headers, credentials: 'include', signal: this.#polls.signal });
      } catch {
        if (this.#ended) return false;
        if (++failures >= SIGN_IN_ATTEMPTS) {
          this.#finish(`no answer to ${SIGN_IN_ATTEMPTS} sign-in attempts (network error)`, 'unreachable');
          return false;
        }
        await pause(500 * 2 ** failures);
        continue;
      }
      failures = 0;
      const body = await response.json().catch(() => undefined) as { sessionId?: string; position?: number; estimatedWaitSeconds?: number; type?: string; detail?: string } | undefined;
      if (this.#ended) return false;
      if (response.status === 200 || response.status === 202) this.#sessionId = body?.sessionId;
      if (response.status === 200) {
        this.timeline.reserved = performance.now();
        return true;
      }
      if (response.status === 202) {
        this.#options.onWaiting?.({ position: body?.position ?? 0, estimatedWaitSeconds: body?.estimatedWaitSeconds });
        this.#options.onStatus(`waiting for an instance: #${body?.position} in line`);
        await pause(MIN_POLL_GAP_MS - (performance.now() - sentAt));
        continue;
      }
      if (!body?.type?.startsWith(PLATFORM_PROBLEM)) {
        this.#sessionId = undefined;
        return true;
      }
      if (response.status === 404 && this.#sessionId) {
        // The place in line lapsed (e.g. the computer slept): join the line again.
        this.#sessionId = undefined;
        continue;
      }
      this.#finish(body.detail ?? `the platform refused the session (${response.status})`, causeOfStatus(response.status));
      return false;
    }
    return false;
  }

  /** Ends the platform's session even when the page is going away: a keepalive request outlives the page. */
  #signOut(): void {
    if (!this.#sessionId) return;
    void fetch(this.#signInUrl, {
      method: 'DELETE', keepalive: true, credentials: 'include', headers: { 'x-svc-absorb': 'true', ...this.#options.platform?.headers, [SESSION_ID]: this.#sessionId },
    }).catch(() => undefined);
  }

  #open(resuming: boolean): void {
    if (this.#ended) return;
    this.#options.onConnecting?.(resuming);
    const url = new URL(this.#options.signalUrl);
    if (this.#sessionId) url.searchParams.set(SESSION_ID, this.#sessionId);
    const ws = new WebSocket(url, this.#options.platform?.protocols);
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

  /**
   * Ends the session on purpose, wherever it is (in line, starting, streaming): the app stops at once
   * instead of waiting for a resume, and the platform gives its instance to the next person.
   */
  bye(reason = 'user left'): void {
    if (this.#ended) return;
    this.#send({ type: 'bye', reason });
    this.#signOut();
    this.#finish(`you ended the session (${reason})`, 'left');
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
        this.#finish(`the app ended the session: ${message.reason}`, 'app-ended');
        return;
      case 'error':
        this.#options.onStatus(`app error: ${message.message}`);
        return;
    }
  }

  #answer(sdp: string): void {
    // Every offer is for a new peer connection (first one, restart, or resume after a reload).
    this.#pc?.close();
    this.#pictureHold?.stop();
    this.#pictureHold = undefined;
    this.#options.onInputChannel?.(undefined);
    const pc = new RTCPeerConnection({
      // Exactly what the app handed over: its STUN/TURN server or nothing, never a public default.
      iceServers: this.#config?.iceServers ?? [],
      iceTransportPolicy: this.#options.relayOnly ? 'relay' : 'all',
      bundlePolicy: 'max-bundle',
    });
    this.#pc = pc;
    const tracks = new Map<string, RTCTrackEvent>();
    pc.ontrack = (event) => {
      tracks.set(event.track.kind, event);
      const [audio, video] = [tracks.get('audio')?.streams[0], tracks.get('video')];
      // Picture and sound in one stream: the app asks for lip-sync (STREAMING_LIP_SYNC=true).
      if (audio && audio === video?.streams[0]) this.#pictureHold ??= new PictureHold(pc, video.receiver);
      if (event.track.kind === 'audio') {
        this.#options.onAudio?.(new MediaStream([event.track]), event.receiver);
        return;
      }
      this.timeline.track = performance.now();
      // No extra buffering: render each frame as soon as it is decoded.
      const receiver = event.receiver as RTCRtpReceiver & { playoutDelayHint?: number; jitterBufferTarget?: number };
      receiver.jitterBufferTarget = 0;
      receiver.playoutDelayHint = 0;
      // The picture alone: the sound, in the same stream (for lip-sync), plays through onAudio.
      this.#options.onVideo(new MediaStream([event.track]), event.receiver);
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
      this.#finish('the session is over and could not be resumed', 'lost');
      return;
    }
    if (FINAL_CLOSE_CODES.includes(code) || code === CloseCode.goingAway) {
      this.#finish(`the app closed the connection: ${reason || code}`, APP_ENDED_CODES.includes(code) ? 'app-ended' : 'lost');
      return;
    }
    if (this.#resumeToken === undefined) {
      // The socket failed before the session started (a refused upgrade looks the same to a page):
      // sign in again, which keeps this session's grant or place, a few times before giving up.
      if (this.#attempt >= NEW_SESSION_ATTEMPTS) {
        this.#finish(`could not connect to the app (${code}${reason ? `: ${reason}` : ''})`, 'unreachable');
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
      this.#finish('the connection to the app was lost and could not be resumed in time', 'lost');
      return;
    }
    const delay = Math.min(2000, 100 * 2 ** this.#attempt);
    this.#attempt++;
    this.#options.onStatus(`signaling lost (${code}); reconnecting in ${delay} ms`);
    this.#reconnectTimer = setTimeout(() => void this.#resumeIfThere(), delay);
  }

  /** After a failed reconnect, the platform says whether the session still exists (409: yes, connected or waiting to be). */
  async #resumeIfThere(): Promise<void> {
    if (this.#attempt > 1 && this.#sessionId) {
      const headers = { 'x-svc-absorb': 'true', [SESSION_ID]: this.#sessionId };
      const answer = await fetch(this.#signInUrl, { method: 'POST', headers, credentials: 'include', signal: this.#polls.signal }).catch(() => undefined);
      if (answer?.status === 404) {
        this.#finish('the session ended while the connection was down', 'lost');
        return;
      }
    }
    this.connect();
  }

  #finish(reason: string, cause: EndCause): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#resumeToken = undefined;
    this.#polls.abort();
    if (this.#pingTimer) clearInterval(this.#pingTimer);
    if (this.#reconnectTimer) clearTimeout(this.#reconnectTimer);
    const ws = this.#ws;
    this.#ws = undefined;
    // Let a queued bye leave before closing.
    if (ws) setTimeout(() => ws.close(1000), 50);
    this.#pc?.close();
    this.#pictureHold?.stop();
    this.#options.onStatus(reason);
    this.#options.onEnded?.(reason, cause);
  }
}
