// The one streaming session this container serves (spec §4.6 rule 3: each session gets a fresh
// container). It owns the signaling connection of the moment and the peer connection, drives the frame
// source and the encoder, and decides when the session is over.
//
//   idle --hello--> live --socket drop--> detached --hello+token--> live
//                    |                      |
//                    +--bye / peer failure--+--resume window over--> ended (process exits 0)
import { randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { AppClipboardMessage, AppStatsMessage, ClientMessage, IceCandidateJson, ServerMessage } from '../client/protocol.ts';
import { CloseCode, PROTOCOL_VERSION } from '../client/protocol.ts';
import { AudioCapture, type AudioMode, type PulseServer } from './audio.ts';
import type { Config } from './config.ts';
import { iceServersFor, type CredentialStore } from './credentials.ts';
import type { EncodedFrame, FrameEncoder } from './encoder.ts';
import type { FrameSource } from './frame-source.ts';
import type { Logger } from './logger.ts';
import { PeerLink, type PeerState } from './peer.ts';
import { parseInputMessage } from './protocol.ts';
import { RtpAudioSender, RtpVideoSender } from './rtp.ts';

export type SessionState = 'idle' | 'live' | 'detached' | 'ended';

/** What the session needs from a signaling connection; implemented over ws in signaling.ts. */
export type SignalingChannel = {
  readonly id: number;
  send(message: ServerMessage): void;
  close(code: number, reason: string): void;
};

export type SessionOptions = {
  config: Config;
  log: Logger;
  credentials: CredentialStore;
  encoder: FrameEncoder;
  source: FrameSource;
  /** The app's sound server, when the session streams audio. */
  audio?: PulseServer;
  /** Called once when the session is over; `error` marks an internal failure (non-zero exit). */
  onEnded: (reason: string, error: boolean) => void;
};

const STATS_INTERVAL_MS = 1000;
/** Above this loss the sound switches to in-band FEC; back after this many seconds below the clean mark. */
const AUDIO_LOSSY_LOSS = 0.02;
const AUDIO_CLEAN_LOSS = 0.005;
const AUDIO_CLEAN_SECONDS = 10;

function median(values: number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

export class StreamingSession {
  readonly id = randomUUID();
  readonly #resumeToken = randomBytes(32).toString('base64url');
  readonly #options: SessionOptions;
  readonly #log: Logger;
  readonly #source: FrameSource;
  /** Input events dropped because a field was bad. */
  inputDropped = 0;
  #state: SessionState = 'idle';
  #channel: SignalingChannel | undefined;
  #peer: PeerLink | undefined;
  #rtp: RtpVideoSender | undefined;
  #rtpAudio: RtpAudioSender | undefined;
  #audioCapture: AudioCapture | undefined;
  /** The capture of a new audio mode while it starts; it takes over with its first packet. */
  #nextAudioCapture: AudioCapture | undefined;
  /** Origin of every RTP clock of the session (media-clock.ts). */
  readonly #clockOriginMs = performance.now();
  #resumeTimer: NodeJS.Timeout | undefined;
  #connectTimer: NodeJS.Timeout | undefined;
  #statsTimer: NodeJS.Timeout | undefined;
  #lastStats = { at: 0, frames: 0, bytes: 0 };
  #endReason: string | undefined;
  #cleanSeconds = 0;
  /** The process's CPU time when the session started: what its set-up costs tells a starved CPU from a slow network. */
  #cpuAtStart: NodeJS.CpuUsage | undefined;

  constructor(options: SessionOptions) {
    this.#options = options;
    this.#log = options.log.child({ sessionId: this.id });
    this.#source = options.source;
  }

  get state(): SessionState {
    return this.#state;
  }

  get endReason(): string | undefined {
    return this.#endReason;
  }

  /** Ports of the current peer's candidates (for logs and tests). */
  get peerPorts(): number[] {
    return this.#peer?.localCandidatePorts() ?? [];
  }

  /** A new WebSocket arrived. Refuse at once what can be refused without its hello. */
  admit(channel: SignalingChannel): boolean {
    if (this.#state === 'ended') {
      channel.close(CloseCode.sessionOver, 'session over: this container serves no more sessions');
      return false;
    }
    return true;
  }

  /** The first message of a connection decides whether it starts, resumes or is refused. */
  hello(channel: SignalingChannel, message: Extract<ClientMessage, { type: 'hello' }>): boolean {
    if (message.protocol !== PROTOCOL_VERSION) {
      channel.close(CloseCode.protocolError, `unsupported protocol ${message.protocol}; this app speaks ${PROTOCOL_VERSION}`);
      return false;
    }
    if (this.#state === 'ended') {
      channel.close(CloseCode.sessionOver, 'session over: this container serves no more sessions');
      return false;
    }
    if (message.resumeToken === undefined) {
      if (this.#state !== 'idle') {
        channel.close(CloseCode.busy, 'busy: this container already has a session (one per container)');
        return false;
      }
      this.#start(channel);
      return true;
    }
    if (this.#state === 'idle' || !this.#tokenMatches(message.resumeToken)) {
      channel.close(CloseCode.badResumeToken, 'unknown or expired resume token');
      return false;
    }
    this.#resume(channel, message.hasPeer !== false);
    return true;
  }

  #tokenMatches(token: string): boolean {
    const a = Buffer.from(token);
    const b = Buffer.from(this.#resumeToken);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  #sendConfig(resumed: boolean): void {
    const { config, encoder } = this.#options;
    this.#channel?.send({
      type: 'config',
      protocol: PROTOCOL_VERSION,
      sessionId: this.id,
      resumeToken: this.#resumeToken,
      resumed,
      // The browser gets the same short-lived TURN REST credentials, so it can relay when it must.
      iceServers: iceServersFor(this.#options.credentials.current),
      video: {
        codec: encoder.codec, encoder: encoder.settings.encoder, width: config.width, height: config.height,
        fps: config.fps, bitrateKbps: config.bitrateKbps,
      },
      keepaliveMs: config.keepaliveMs,
      resumeWindowMs: config.resumeWindowMs,
    });
  }

  #start(channel: SignalingChannel): void {
    this.#state = 'live';
    this.#channel = channel;
    this.#cpuAtStart = process.cpuUsage();
    this.#log.info({ connection: channel.id }, 'session started');
    this.#sendConfig(false);
    void this.#newPeer('session start');
    this.#source.prime();
    this.#startAudio('low-delay');
  }

  #startAudio(mode: AudioMode): void {
    const { audio, config } = this.#options;
    if (!audio) return;
    const capture: AudioCapture = new AudioCapture(audio, config.ffmpegPath, this.#log, (packet) => {
      if (capture === this.#nextAudioCapture) this.#takeOverAudio(capture);
      if (capture === this.#audioCapture) this.#rtpAudio?.send(packet);
    }, (reason) => {
      if (capture !== this.#audioCapture && capture !== this.#nextAudioCapture) return;
      this.#log.error({ reason }, 'audio capture failed');
      this.end(reason, true);
    }, mode);
    if (this.#audioCapture) this.#nextAudioCapture = capture;
    else this.#audioCapture = capture;
  }

  /**
   * A new mode's capture replaces the old one only once it sends: ffmpeg takes about 1.5 s from its start
   * to its first packet, and stopping the old capture first left a silence that long at every switch.
   */
  #takeOverAudio(capture: AudioCapture): void {
    this.#audioCapture?.stop();
    this.#audioCapture = capture;
    this.#nextAudioCapture = undefined;
  }

  /**
   * Opus in-band FEC only while the link loses packets (the browser asked for it): 20 ms hybrid frames cost
   * 15 ms of delay, so a clean link keeps the 5 ms low-delay mode. Loss is the video's transport-wide loss.
   */
  #adaptAudio(): void {
    const capture = this.#audioCapture;
    const loss = this.#rtp?.estimator?.lossFraction(performance.now());
    if (!capture || this.#nextAudioCapture || loss === undefined || !this.#peer?.opusInbandFec) return;
    this.#cleanSeconds = loss < AUDIO_CLEAN_LOSS ? this.#cleanSeconds + 1 : 0;
    const want: AudioMode = capture.mode === 'low-delay'
      ? (loss > AUDIO_LOSSY_LOSS ? 'resilient' : 'low-delay')
      : (this.#cleanSeconds >= AUDIO_CLEAN_SECONDS ? 'low-delay' : 'resilient');
    if (want === capture.mode) return;
    this.#log.info({ from: capture.mode, to: want, loss: Math.round(loss * 1000) / 1000 }, 'audio mode changed');
    this.#startAudio(want);
  }

  #resume(channel: SignalingChannel, clientHasPeer: boolean): void {
    if (this.#resumeTimer) clearTimeout(this.#resumeTimer);
    this.#resumeTimer = undefined;
    const previous = this.#channel;
    this.#channel = channel;
    this.#state = 'live';
    // The token proves this is the session's own client: a connection the app still believes alive
    // (a half-open TCP connection behind a proxy) gives way to it.
    previous?.close(CloseCode.replaced, 'replaced by a resumed connection');
    const peerAlive = this.#peer !== undefined && this.#peer.pc.connectionState === 'connected';
    this.#log.info({ connection: channel.id, clientHasPeer, peerAlive }, 'session resumed');
    this.#sendConfig(true);
    if (!clientHasPeer || !peerAlive) void this.#newPeer('resume');
  }

  /** A connection ended. Without a bye this is a drop: the session waits for its client to resume. */
  closed(channel: SignalingChannel, why: string): void {
    if (channel !== this.#channel || this.#state !== 'live') return;
    this.#channel = undefined;
    const windowMs = this.#options.config.resumeWindowMs;
    if (windowMs === 0) {
      this.end(`signaling connection lost (${why}), no resume window`);
      return;
    }
    this.#state = 'detached';
    this.#log.info({ connection: channel.id, why, resumeWindowMs: windowMs }, 'signaling connection lost, waiting for resume');
    this.#resumeTimer = setTimeout(() => this.end('resume window expired'), windowMs);
  }

  message(channel: SignalingChannel, message: ClientMessage): void {
    if (channel !== this.#channel || this.#state !== 'live') return;
    switch (message.type) {
      case 'hello':
        channel.close(CloseCode.protocolError, 'hello sent twice');
        return;
      case 'ping':
        channel.send({ type: 'pong', t: message.t });
        return;
      case 'answer':
        this.#applyAnswer(message.sdp);
        return;
      case 'candidate':
        this.#addCandidate(message.candidate);
        return;
      case 'restart':
        void this.#newPeer('client asked for restart');
        return;
      case 'bye':
        this.end(`client said bye${message.reason ? `: ${message.reason.slice(0, 80)}` : ''}`);
        return;
    }
  }

  #applyAnswer(sdp: string): void {
    const peer = this.#peer;
    if (!peer) return;
    peer.applyAnswer(sdp).then(() => {
      if (peer !== this.#peer || peer.videoSender.codec) return;
      // The browser accepted the offer but not the video codec: nothing could ever be shown.
      const codec = this.#options.encoder.codec;
      this.#channel?.send({ type: 'error', code: 'no-common-codec', message: `the browser did not accept ${codec} video` });
      this.end(`browser cannot receive ${codec} video`);
    }, (error: unknown) => {
      if (peer !== this.#peer) return;
      this.#log.warn({ err: error }, 'answer rejected');
      this.#channel?.send({ type: 'error', code: 'bad-answer', message: `answer rejected: ${(error as Error).message}`.slice(0, 200) });
    });
  }

  #addCandidate(candidate: IceCandidateJson | null): void {
    const peer = this.#peer;
    peer?.addCandidate(candidate).catch((error: unknown) => {
      if (peer === this.#peer) this.#log.debug({ err: error }, 'remote candidate rejected');
    });
  }

  /** Replaces the peer connection (old sockets are released first) and sends a fresh offer. */
  async #newPeer(why: string): Promise<void> {
    const old = this.#peer;
    this.#peer = undefined;
    this.#rtp?.close();
    this.#rtp = undefined;
    this.#rtpAudio = undefined;
    if (this.#connectTimer) clearTimeout(this.#connectTimer);
    if (old) await old.close();
    if (this.#state === 'ended') return;
    const { config, credentials, encoder } = this.#options;
    const usable = await credentials.usable();
    if (this.state === 'ended') return;
    if (credentials.current && !usable) this.#log.warn({ stunPort: credentials.current.stunPort }, 'the STUN/TURN server on the loopback does not answer here: host candidates only');
    let peer: PeerLink;
    try {
      peer = new PeerLink({
        iceServers: iceServersFor(usable),
        portRange: config.portRange,
        bindAddress: config.bindAddress,
        codec: encoder.codec,
        audio: this.#options.audio !== undefined,
        lipSync: config.lipSync,
        videoFec: config.videoFec,
        log: this.#log,
        onCandidate: (candidate) => { if (peer === this.#peer) this.#channel?.send({ type: 'candidate', candidate }); },
        onState: (state) => { if (peer === this.#peer) this.#peerState(peer, state); },
        onMediaReady: () => { if (peer === this.#peer) this.#startMedia(peer); },
        onInput: (raw) => { if (peer === this.#peer) this.#input(raw); },
        onKeyframeRequest: () => {
          this.#log.debug('pli received');
          if (peer === this.#peer) encoder.requestKeyframe('pli');
        },
        onInputChannelOpen: () => { if (peer === this.#peer) this.#sendStats(); },
      });
      this.#peer = peer;
      const sdp = await peer.createOffer();
      if (peer !== this.#peer) return;
      this.#channel?.send({ type: 'offer', sdp });
      this.#log.info({ why, withStunTurn: usable !== undefined }, 'offer sent');
      this.#connectTimer = setTimeout(() => {
        if (peer === this.#peer && peer.pc.connectionState !== 'connected') this.end('peer connection did not connect in time');
      }, config.connectTimeoutMs);
    } catch (error) {
      this.#log.error({ err: error }, 'could not create the peer connection');
      this.end('could not create the peer connection', true);
    }
  }

  #peerState(peer: PeerLink, state: PeerState): void {
    const connected = state === 'connected' ? { pair: peer.selectedPair, dtlsRole: peer.dtlsRole } : {};
    this.#log.info({ state, ...connected, ports: peer.localCandidatePorts() }, 'peer connection state');
    if (state === 'connected') {
      if (this.#connectTimer) clearTimeout(this.#connectTimer);
      this.#connectTimer = undefined;
    } else if (state === 'failed' || state === 'closed') {
      this.end(`peer connection ${state}`);
    }
  }

  /** The peer's media transport is up (its data channel may still be connecting): video and sound flow. */
  #startMedia(peer: PeerLink): void {
    this.#log.info('media transport connected');
    this.#rtp?.close();
    this.#rtp = this.#videoSender(peer);
    // The browser may decline the audio track; the session goes on without it.
    if (peer.audioSender?.codec) this.#rtpAudio = new RtpAudioSender(peer.audioSender, this.#log, this.#clockOriginMs);
    const { encoder } = this.#options;
    // A fresh encoder process (or a switch to the warm spare) makes the very first frame a keyframe.
    if (!encoder.running) encoder.start();
    else encoder.requestKeyframe('peer connected');
    this.#source.start();
    this.#statsTimer ??= setInterval(() => {
      this.#sendStats();
      this.#adaptAudio();
    }, STATS_INTERVAL_MS);
  }

  /**
   * The video sender of a connected peer. With transport-wide feedback its bandwidth estimate drives the
   * encoder's rate (from a low start, probing up); without it the encoder keeps the configured rate.
   */
  #videoSender(peer: PeerLink): RtpVideoSender {
    const { config, encoder } = this.#options;
    const rtp = new RtpVideoSender(encoder.codec, peer.videoSender, this.#log, this.#clockOriginMs, {
      transportCc: peer.transportCc,
      startKbps: config.startBitrateKbps,
      minKbps: config.minBitrateKbps,
      maxKbps: config.bitrateKbps,
      onTargetKbps: (kbps) => { if (rtp === this.#rtp) encoder.setBitrate(kbps); },
      onUnrepairable: (reason) => { if (rtp === this.#rtp) encoder.requestKeyframe(reason); },
    }, peer.playoutDelayExtensionId, peer.videoFec);
    encoder.setBitrate(rtp.encoderKbps);
    this.#log.info({ transportCc: peer.transportCc, startKbps: rtp.targetKbps, fec: peer.videoFec ?? false }, 'video rate control');
    return rtp;
  }

  /** Encoded frames from the encoder, forwarded to the peer that is connected now (if any). */
  deliver(frame: EncodedFrame): void {
    const rtp = this.#rtp;
    if (!rtp) return;
    if (rtp.framesSent === 0) {
      const cpu = process.cpuUsage(this.#cpuAtStart);
      this.#log.info({ frameNumber: frame.frameNumber, keyframe: frame.keyframe, bytes: frame.data.length, encodeMs: Math.round(frame.encodeMs * 10) / 10,
        setupCpuMs: Math.round((cpu.user + cpu.system) / 1000) }, 'first frame sent');
    }
    rtp.send(frame);
  }

  #input(raw: string): void {
    const parsed = parseInputMessage(raw);
    if (parsed.ok && this.#source.input(parsed.value)) return;
    // Dropped and counted, never fatal: the first one is logged, later ones only at debug level.
    this.inputDropped++;
    const error = parsed.ok ? `${parsed.value.type} event cannot be applied by the ${this.#source.kind} source` : parsed.error;
    this.#log[this.inputDropped === 1 ? 'info' : 'debug']({ error, dropped: this.inputDropped }, 'input event dropped');
  }

  /** Text copied in the application, for the browser's clipboard (dropped while no peer is connected). */
  sendClipboard(text: string): void {
    const message: AppClipboardMessage = { type: 'clipboard', text };
    this.#peer?.sendInputChannel(JSON.stringify(message));
  }

  #sendStats(): void {
    const peer = this.#peer;
    if (!peer) return;
    const s = this.#options.encoder.stats;
    const now = performance.now();
    const seconds = (now - this.#lastStats.at) / 1000;
    const message: AppStatsMessage = {
      type: 'stats',
      encoder: s.encoder,
      frame: this.#source.feed.frameNumber,
      fps: seconds > 0 && this.#lastStats.at > 0 ? Math.round(((s.framesOut - this.#lastStats.frames) / seconds) * 10) / 10 : 0,
      kbps: seconds > 0 && this.#lastStats.at > 0 ? Math.round(((s.bytesOut - this.#lastStats.bytes) * 8) / seconds / 1000) : 0,
      encodeMsP50: Math.round(median(s.recentEncodeMs) * 100) / 100,
      encodeMsLast: Math.round((s.recentEncodeMs.at(-1) ?? 0) * 100) / 100,
      keyframes: s.keyframes,
      skipped: s.framesSkipped + this.#source.feed.framesSkipped,
      inputDropped: this.inputDropped,
    };
    this.#lastStats = { at: now, frames: s.framesOut, bytes: s.bytesOut };
    peer.sendInputChannel(JSON.stringify(message));
  }

  /**
   * Ends the session for good: media stops, ports are released, the container's work is done.
   * The close code defaults to 1000 (4500 after an internal error).
   */
  end(reason: string, error = false, closeCode: number = error ? CloseCode.internalError : CloseCode.normal): void {
    if (this.#state === 'ended') return;
    const wasIdle = this.#state === 'idle';
    this.#state = 'ended';
    this.#endReason = reason;
    for (const timer of [this.#resumeTimer, this.#connectTimer]) if (timer) clearTimeout(timer);
    if (this.#statsTimer) clearInterval(this.#statsTimer);
    this.#source.stop();
    this.#audioCapture?.stop();
    this.#nextAudioCapture?.stop();
    this.#options.encoder.stop();
    const channel = this.#channel;
    this.#channel = undefined;
    if (channel) {
      channel.send({ type: 'bye', reason });
      channel.close(closeCode, reason.slice(0, 120));
    }
    const peer = this.#peer;
    this.#peer = undefined;
    const rtp = this.#rtp;
    rtp?.close();
    this.#rtp = undefined;
    this.#rtpAudio = undefined;
    const encodeMsP50 = median(this.#options.encoder.stats.recentEncodeMs);
    const feed = this.#source.feed;
    this.#log.info({ reason, error, wasIdle, source: this.#source.kind, framesSubmitted: feed.framesSubmitted, framesSkipped: feed.framesSkipped, framesUnchanged: feed.framesUnchanged, inputDropped: this.inputDropped,
      audioPackets: this.#audioCapture?.packets, encoder: { ...this.#options.encoder.stats, recentEncodeMs: undefined, encodeMsP50 },
      video: rtp && { targetKbps: rtp.targetKbps, overuses: rtp.estimator?.overuseEvents, lossBackoffs: rtp.estimator?.lossBackoffs,
        pacerMaxQueueMs: Math.round(rtp.pacer.maxQueueMs), retransmitted: rtp.retransmissions.resent, resentUnasked: rtp.resentUnasked, resentLost: rtp.resentLost, leftToFec: rtp.leftToFec,
        fecPackets: rtp.fecPacketsSent, fecBytes: rtp.fecBytesSent, mediaPackets: rtp.packetsSent,
        retransmissionsRefused: { inFlight: rtp.retransmissions.refusedInFlight, overBudget: rtp.retransmissions.refusedOverBudget } } }, 'session ended');
    const finish = (): void => this.#options.onEnded(reason, error);
    if (peer) peer.close().then(finish, finish);
    else finish();
  }
}
