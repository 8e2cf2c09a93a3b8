// How the app's DTLS handshake (it is the client) starts, faster than werift alone would:
// - werift's DTLS client sends its ClientHello 100 ms after its ICE connects, a pause on the way to every
//   session's first frame. The browser is the DTLS server and holds a ClientHello that comes before its
//   own ICE is done (see PeerLink.createOffer), so the hello leaves here the moment the client exists, and
//   werift's own call 100 ms later gets the handshake already under way instead of starting another.
// - werift sends a flight again when no answer came within 0.5 s, then 1 s, 1.5 s...: on a lossy link a
//   lost ClientHello or Finished cost the first frame half a second or more each. The browser resends its
//   flights after a time that follows the round trip; here the app's flights go again after two ICE round
//   trips (at least RESEND_MIN_MS), doubling, beside werift's own timer (a flight twice is harmless: the
//   server answers a repeated flight by repeating its own).
import type { DtlsClient, DtlsSocket, RTCDtlsTransport } from 'werift';

type DtlsHost = Pick<RTCDtlsTransport, 'state' | 'role' | 'onStateChange'> & {
  dtls?: DtlsSocket;
  /** The selected ICE pair's round trip, seconds, once measured. */
  iceTransport?: { connection: { nominated?: { rtt?: number } } };
};

/** A flight goes again when unanswered after this many round trips... */
const RESEND_ROUND_TRIPS = 2;
/** ...but not sooner than this (the server's own work on a loaded host), nor later than werift's first try. */
const RESEND_MIN_MS = 100;
const RESEND_MAX_MS = 500;
/** After this many resends of one flight werift's timer alone goes on (it gives up after ten). */
const MAX_RESENDS = 4;

/** Starts this transport's DTLS handshake as soon as werift makes its client, when it is the client. */
export function startDtlsAtOnce(transport: DtlsHost): void {
  const start = (): void => {
    if (transport.role !== 'client' || !transport.dtls) return;
    const dtls = transport.dtls as DtlsClient; // the client role's socket
    resendUnansweredFlights(dtls, firstResendMs(transport.iceTransport?.connection.nominated?.rtt));
    const connect = dtls.connect.bind(dtls);
    let started: Promise<void> | undefined;
    dtls.connect = () => (started ??= connect());
    // werift's own call takes the same promise and reports a failure from it.
    dtls.connect().catch(() => { /* reported by werift's own call */ });
  };
  // werift makes its DTLS socket synchronously right after announcing 'connecting'.
  if (transport.state === 'connecting') start();
  else transport.onStateChange.once((state) => { if (state === 'connecting') queueMicrotask(start); });
}

/** How long a flight waits for its answer before it goes again, for an ICE round trip in seconds. */
export function firstResendMs(rttSeconds: number | undefined): number {
  if (rttSeconds === undefined) return RESEND_MAX_MS / 2;
  return Math.min(RESEND_MAX_MS, Math.max(RESEND_MIN_MS, Math.round(RESEND_ROUND_TRIPS * rttSeconds * 1000)));
}

/**
 * Until the handshake is done, sends each of the client's flights again while the server has not
 * answered it: the datagrams werift sends while its flight number stays the same are one flight (its own
 * resends are the same buffers); an answer moves the number on (or completes the handshake). The resends
 * go the way werift's own do, through `dtls-finished.ts` when it is in place (a fresh Finished each time).
 */
function resendUnansweredFlights(socket: DtlsSocket, firstWaitMs: number): void {
  const channel = socket.transport;
  const send = channel.send;
  let flight: { number: number; datagrams: Set<Buffer>; timer: NodeJS.Timeout } | undefined;
  const resendAfter = (waitMs: number, resends: number): NodeJS.Timeout => setTimeout(() => {
    if (!flight || socket.connected || socket.dtls.flight !== flight.number || channel.socket.closed) return;
    for (const datagram of flight.datagrams) send(datagram).catch(() => { /* werift's own resends go on */ });
    if (resends + 1 < MAX_RESENDS) flight.timer = resendAfter(waitMs * 2, resends + 1);
  }, waitMs).unref();
  const recording: typeof send = (datagram, address) => {
    if (!socket.connected) {
      const number = socket.dtls.flight;
      if (number !== flight?.number) {
        if (flight) clearTimeout(flight.timer);
        flight = { number, datagrams: new Set(), timer: resendAfter(firstWaitMs, 0) };
      }
      flight.datagrams.add(datagram);
    }
    return send(datagram, address);
  };
  // `send` is a readonly field in werift's types; werift's flights look it up on every send.
  Object.assign(channel, { send: recording });
}
