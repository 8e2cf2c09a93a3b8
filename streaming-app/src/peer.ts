// One werift peer connection for the session: a send-only video track, a send-only Opus audio track when
// the app has sound, and the "input" DataChannel, bundled on a single ICE transport whose sockets all come from STREAMING_PORT_BINDING_RANGE.
// The app is always the offerer (see docs/streaming-protocol.md).
import { randomInt } from 'node:crypto';
import {
  MediaStream, RTCPeerConnection, RTCRtpCodecParameters, RTCRtpHeaderExtensionParameters, useH264, useNACK, useOPUS, usePLI, useREMB, useTWCC, useVP8,
  type RTCDataChannel, type RTCDtlsTransport, type RTCRtpSender, type RTCIceCandidate,
} from 'werift';
import type { IceCandidateJson } from '../client/protocol.ts';
import { INPUT_CHANNEL_LABEL } from '../client/protocol.ts';
import type { IceServer } from './credentials.ts';
import { renumberRetransmittedFinished } from './dtls-finished.ts';
import { startDtlsAtOnce } from './dtls-start.ts';
import type { VideoCodec } from './encoder.ts';
import type { Logger } from './logger.ts';
import type { PortRange } from './port-budget.ts';
import type { VideoFec } from './rtp.ts';

/**
 * Chrome's playout-delay RTP header extension. Sending min = max = 0 switches its receiver to the
 * low-latency renderer: frames are shown as soon as they are decoded instead of being scheduled by its
 * render-time smoothing (the receiver-side playoutDelayHint alone only lowers the minimum).
 */
export const PLAYOUT_DELAY_URI = 'http://www.webrtc.org/experiments/rtp-hdrext/playout-delay';
const PLAYOUT_DELAY_ID = 6;
/** Transport-wide sequence numbers (draft-holmer-rmcat-transport-wide-cc-extensions-01) for send-side estimation. */
export const TRANSPORT_CC_URI = 'http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01';
const TRANSPORT_CC_ID = 3;

/**
 * The video codec with what the sender acts on: NACK (retransmission, over RTX when the browser takes it),
 * PLI, transport-wide feedback (the estimator's input) and REMB (for a receiver that offers only that).
 * With `fec`, FlexFEC as well (sent only while the link is lossy, see rtp.ts), as Chrome offers it.
 */
function videoCodecs(codec: VideoCodec, fec: boolean): RTCRtpCodecParameters[] {
  const rtcpFeedback = [useNACK(), usePLI(), useTWCC(), useREMB()];
  const primary = codec === 'H264' ? useH264({ rtcpFeedback }) : useVP8({ rtcpFeedback });
  // werift gives RTX the payload type after its primary's and sets apt= to it.
  const rtx = new RTCRtpCodecParameters({ mimeType: 'video/rtx', clockRate: 90_000 });
  if (!fec) return [primary, rtx];
  const flexfec = new RTCRtpCodecParameters({ mimeType: `video/${FLEXFEC}`, clockRate: 90_000, parameters: 'repair-window=10000000' });
  return [primary, rtx, flexfec];
}

const FLEXFEC = 'flexfec-03';

/**
 * The offer with the FEC stream's SSRC tied to the video's (`ssrc-group:FEC-FR`, RFC 5956), which
 * werift does not write: without it a browser has no FEC stream to decode. Written after the video's own
 * SSRC lines: Chrome takes the first SSRC it reads for the media's (the picture stayed black).
 */
export function withFecStream(sdp: string, videoSsrc: number, fecSsrc: number): string {
  const cname = new RegExp(`^a=ssrc:${videoSsrc} cname:(\\S+)`, 'm').exec(sdp)?.[1];
  const video = /^m=video [^]*?(?=^m=|(?![^]))/m.exec(sdp);
  const lastSsrcLine = video && [...video[0].matchAll(/^a=ssrc:.*\r?\n/gm)].at(-1);
  if (!cname || !video || !lastSsrcLine || lastSsrcLine.index === undefined) throw new Error('the offer has no video SSRC to tie the FEC stream to');
  const at = video.index + lastSsrcLine.index + lastSsrcLine[0].length;
  return `${sdp.slice(0, at)}a=ssrc-group:FEC-FR ${videoSsrc} ${fecSsrc}\r\na=ssrc:${fecSsrc} cname:${cname}\r\n${sdp.slice(at)}`;
}

/** FlexFEC's payload type in an answer's video section, when the browser took it. */
export function flexfecPayloadType(sdp: string): number | undefined {
  const video = /^m=video [^]*?(?=^m=|(?![^]))/m.exec(sdp)?.[0] ?? '';
  const match = new RegExp(`^a=rtpmap:(\\d+) ${FLEXFEC}/90000\\s*$`, 'im').exec(video);
  return match ? Number(match[1]) : undefined;
}

/** RFC 9260's RTO.Initial, seconds. */
const SCTP_INITIAL_RTO_S = 1;

const MDNS_CANDIDATE = /^(?:candidate:)?\S+ \d+ \S+ \d+ \S+\.local /i;

export type PeerState = 'new' | 'connecting' | 'connected' | 'disconnected' | 'failed' | 'closed';

export type PeerOptions = {
  iceServers: IceServer[];
  portRange: PortRange;
  bindAddress: string;
  codec: VideoCodec;
  /** Offer an Opus audio track too. */
  audio: boolean;
  /** Let the browser delay video to match the sound (no zero playout delay). */
  lipSync: boolean;
  /** Offer FlexFEC for video (FEC on a lossy link). */
  videoFec: boolean;
  log: Logger;
  onCandidate: (candidate: IceCandidateJson | null) => void;
  onState: (state: PeerState) => void;
  /**
   * The media's DTLS handshake is done and SRTP keyed: video may flow. werift's connection state waits
   * for the data channel's SCTP association too, whose first retransmission comes after 3 s (RFC 4960's
   * initial RTO): on a lossy link the picture would wait for the input channel.
   */
  onMediaReady: () => void;
  onInput: (raw: string) => void;
  onKeyframeRequest: () => void;
  onInputChannelOpen: () => void;
};

export class PeerLink {
  readonly pc: RTCPeerConnection;
  readonly videoSender: RTCRtpSender;
  readonly audioSender: RTCRtpSender | undefined;
  readonly inputChannel: RTCDataChannel;
  readonly #log: Logger;
  readonly #onMediaReady: () => void;
  #localDescriptionApplied: Promise<unknown> = Promise.resolve();
  /** Header extension id of playout-delay if the answer accepted it. */
  playoutDelayExtensionId: number | undefined;
  /** Whether the answer accepted transport-wide congestion control (extension and feedback). */
  transportCc = false;
  /** Whether the browser asked for Opus in-band FEC (useinbandfec=1 in its answer). */
  opusInbandFec = false;
  /** Video FEC's payload type and stream if the answer accepted FlexFEC. */
  videoFec: VideoFec | undefined;
  /** The FEC stream's SSRC, when offered. */
  #fecSsrc: number | undefined;
  #closed = false;

  constructor(options: PeerOptions) {
    this.#log = options.log;
    this.#onMediaReady = options.onMediaReady;
    this.#fecSsrc = options.videoFec ? randomInt(1, 2 ** 32) : undefined;
    this.pc = new RTCPeerConnection({
      // Exactly the platform's STUN/TURN server, or nothing: never werift's default public STUN server.
      iceServers: options.iceServers,
      icePortRange: [options.portRange.min, options.portRange.max],
      // One fixed IPv4 interface: one host socket, plus one for the TURN allocation when creds exist.
      iceInterfaceAddresses: { udp4: options.bindAddress },
      iceUseIpv4: true,
      iceUseIpv6: false,
      iceUseTcp: false,
      bundlePolicy: 'max-bundle',
      // A STUN server that does not answer must not hold the offer back for long.
      iceStunGatherTimeout: 2,
      // werift applies the answer only once gathering is over, and its TURN client waits 8 s for a server
      // that does not answer (one on a loopback that is not the platform's): the first frame would wait too.
      iceTurnConnectTimeout: 1,
      codecs: { video: videoCodecs(options.codec, options.videoFec), audio: options.audio ? [useOPUS()] : [] },
      // Zero playout delay shows frames as they come, which also keeps the browser from holding them back
      // to meet the sound: with lip-sync it is not asked for.
      headerExtensions: {
        video: [
          new RTCRtpHeaderExtensionParameters({ id: TRANSPORT_CC_ID, uri: TRANSPORT_CC_URI }),
          ...(options.lipSync ? [] : [new RTCRtpHeaderExtensionParameters({ id: PLAYOUT_DELAY_ID, uri: PLAYOUT_DELAY_URI })]),
        ],
        audio: [],
      },
    });
    // Browsers line up (lip-sync) only the tracks of one stream, by holding the picture back to meet the
    // sound: one stream with lip-sync, else a stream each, so the picture never waits.
    const streams = options.lipSync ? [new MediaStream({ id: 'svc' })] : undefined;
    this.videoSender = this.pc.addTransceiver('video', { direction: 'sendonly', streams }).sender;
    this.audioSender = options.audio ? this.pc.addTransceiver('audio', { direction: 'sendonly', streams }).sender : undefined;
    // Reliable and ordered: a lost key press would be a visible bug; pointer moves are coalesced per
    // animation frame by the client, so retransmission rarely has anything to do.
    this.inputChannel = this.pc.createDataChannel(INPUT_CHANNEL_LABEL, { ordered: true });
    this.inputChannel.onMessage.subscribe((data) => options.onInput(typeof data === 'string' ? data : data.toString('utf8')));
    this.inputChannel.stateChanged.subscribe((state) => { if (state === 'open') options.onInputChannelOpen(); });
    this.videoSender.onPictureLossIndication.subscribe(() => options.onKeyframeRequest());
    this.pc.onIceCandidate.subscribe((candidate: RTCIceCandidate | undefined) => {
      if (this.#closed) return;
      options.onCandidate(candidate ? {
        candidate: candidate.candidate,
        sdpMid: candidate.sdpMid ?? null,
        sdpMLineIndex: candidate.sdpMLineIndex ?? null,
      } : null);
    });
    this.pc.connectionStateChange.subscribe((state) => {
      if (this.#closed) return;
      // An exception thrown into werift's event would be taken as a connection failure; keep them apart.
      try {
        options.onState(state);
      } catch (error) {
        options.log.error({ err: error, state }, 'peer state handler failed');
      }
    });
    this.pc.iceConnectionStateChange.subscribe((state) => { if (!this.#closed) this.#log.debug({ iceState: state }, 'ice connection state'); });
    if (!options.iceServers.some((server) => server.urls.startsWith('stun:'))) this.#askNoStunServer();
  }

  /**
   * werift falls back to Google's public STUN server when it is given none: a session without the
   * platform's would send binding requests there, and where nothing answers (the sandbox's network, a
   * closed network) gathering, and so the answer, waited iceStunGatherTimeout: the demo's first frame
   * came 2 s late. The transport exists once the transceivers do; gathering starts at the offer.
   */
  #askNoStunServer(): void {
    for (const transport of this.pc.iceTransports) transport.connection.stunServer = undefined;
  }

  /**
   * Creates the offer and returns its SDP at once; candidates follow through onCandidate while werift
   * gathers (host sockets first, then STUN/TURN), so the browser can start working on the answer early.
   *
   * The offer takes the DTLS client role (`setup:active`; werift would offer `actpass`, and a browser then
   * always picks the client role). As server, werift drops the browser's ClientHello when it comes before
   * werift's own ICE check is done, and the handshake then waits for the browser's retransmission timer
   * (measured 0.1-0.6 s, and a cookie round trip more); as client, werift sends its ClientHello the moment
   * its ICE is done, and a browser holds one that arrives early until its side is ready.
   */
  async createOffer(): Promise<string> {
    const offer = await this.pc.createOffer();
    this.#numberChannelsEarly();
    this.#localDescriptionApplied = this.pc.setLocalDescription(offer).then(() => {
      if (!this.#closed) this.#log.debug({ candidates: this.localCandidatePorts() }, 'ice gathering complete');
    });
    this.#localDescriptionApplied.catch(() => { /* surfaced by applyAnswer */ });
    const sdp = offer.sdp.replaceAll(/^a=setup:actpass(?=\r?$)/gm, 'a=setup:active');
    if (this.#fecSsrc === undefined) return sdp;
    try {
      return withFecStream(sdp, this.videoSender.ssrc, this.#fecSsrc);
    } catch (error) {
      // The picture does not need FEC: without the FEC stream the answer's FlexFEC goes unused.
      this.#log.warn({ err: error }, 'video FEC not offered');
      this.#fecSsrc = undefined;
      return sdp;
    }
  }

  /**
   * werift numbers the input channel when the SCTP association comes up, from a counter it sets only once
   * it starts SCTP itself, after its DTLS handshake resolves. As the DTLS client, the browser's SCTP INIT
   * can bring the association up first (seen at 5 % loss), and werift then throws reading the unset
   * counter: the session dies. The counter is set now to what werift's own start would set.
   */
  #numberChannelsEarly(): void {
    // Both are private in werift's types; the fields are plain properties at run time.
    const sctp = this.pc.sctpTransport as unknown as { dataChannelId?: number; readonly isServer: boolean } | undefined;
    if (sctp && sctp.dataChannelId === undefined) sctp.dataChannelId = sctp.isServer ? 0 : 1;
  }

  async applyAnswer(sdp: string): Promise<void> {
    // werift applies the local description only after gathering; the answer has to wait for it.
    await this.#localDescriptionApplied;
    await this.pc.setRemoteDescription({ type: 'answer', sdp });
    for (const transport of this.pc.dtlsTransports) {
      renumberRetransmittedFinished(transport, this.#log);
      startDtlsAtOnce(transport);
    }
    this.#whenMediaReady(this.videoSender.dtlsTransport);
    this.#shortenSctpSetUpTimer();
    const extmap = new RegExp(`^a=extmap:(\\d+)(?:/\\w+)? ${PLAYOUT_DELAY_URI.replaceAll('.', '\\.')}\\s*$`, 'm').exec(sdp);
    this.playoutDelayExtensionId = extmap ? Number(extmap[1]) : undefined;
    this.transportCc = sdp.includes(TRANSPORT_CC_URI) && /^a=rtcp-fb:\S+ transport-cc/m.test(sdp);
    this.opusInbandFec = /^a=fmtp:\d+ .*useinbandfec=1/m.test(sdp);
    const fecPayloadType = flexfecPayloadType(sdp);
    this.videoFec = fecPayloadType !== undefined && this.#fecSsrc !== undefined ? { payloadType: fecPayloadType, ssrc: this.#fecSsrc } : undefined;
  }

  /**
   * werift retransmits a lost SCTP INIT or COOKIE ECHO after 3 s (RFC 4960's initial RTO), so on a lossy
   * link the input channel opened 3-6 s after the picture. RFC 9260 lowered the initial RTO to 1 s, which is
   * werift's minimum; measured round trips take over from the first acknowledgement on.
   */
  #shortenSctpSetUpTimer(): void {
    // Private in werift's types; a plain property at run time, read at each retransmission.
    const association = (this.pc.sctpTransport as unknown as { sctp?: { rto: number } } | undefined)?.sctp;
    if (association) association.rto = SCTP_INITIAL_RTO_S;
  }

  #whenMediaReady(transport: RTCDtlsTransport): void {
    const ready = (): void => { if (!this.#closed) this.#onMediaReady(); };
    if (transport.state === 'connected') ready();
    else transport.onStateChange.subscribe((state) => { if (state === 'connected') ready(); });
  }

  async addCandidate(candidate: IceCandidateJson | null): Promise<void> {
    if (candidate === null || candidate.candidate === '') return; // end of candidates: nothing to do in werift
    // Browsers hide host addresses behind mDNS names (….local). Resolving one would open a multicast
    // socket on port 5353, outside the port range, and can stall werift for 10 s; the browser's address
    // is learnt anyway from its connectivity checks (peer-reflexive candidate).
    if (MDNS_CANDIDATE.test(candidate.candidate)) return;
    await this.pc.addIceCandidate({
      candidate: candidate.candidate,
      sdpMid: candidate.sdpMid ?? undefined,
      sdpMLineIndex: candidate.sdpMLineIndex ?? undefined,
    });
  }

  sendInputChannel(text: string): void {
    if (this.inputChannel.readyState === 'open') this.inputChannel.send(text);
  }

  /**
   * Local ports behind the advertised candidates: a host candidate's own port; for server-reflexive and
   * relayed ones the related port (without NAT in between, the port of the local socket).
   */
  localCandidatePorts(): number[] {
    const ports = new Set<number>();
    for (const transport of this.pc.iceTransports) {
      for (const c of transport.localCandidates) {
        if (c.type === 'host') ports.add(c.port);
        else if (c.relatedPort) ports.add(c.relatedPort);
      }
    }
    return [...ports].sort((a, b) => a - b);
  }

  /** This side's DTLS role once the answer set it ('client' with any answer to our offer). */
  get dtlsRole(): string | undefined {
    return this.pc.dtlsTransports[0]?.role;
  }

  get selectedPair(): { local: string; remote: string } | undefined {
    const pair = this.pc.iceTransports[0]?.getSelectedCandidatePair();
    return pair ? { local: pair.local.candidate, remote: pair.remote.candidate } : undefined;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.pc.close().catch((error: unknown) => this.#log.debug({ err: error }, 'peer close failed'));
  }
}
