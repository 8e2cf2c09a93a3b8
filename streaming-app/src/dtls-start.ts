// werift's DTLS client sends its ClientHello 100 ms after its ICE connects, a pause on the way to every
// session's first frame. The browser is the DTLS server and holds a ClientHello that comes before its own
// ICE is done (see PeerLink.createOffer), so the hello leaves here the moment the client exists, and
// werift's own call 100 ms later gets the handshake already under way instead of starting another.
import type { DtlsClient, DtlsSocket, RTCDtlsTransport } from 'werift';

type DtlsHost = Pick<RTCDtlsTransport, 'state' | 'role' | 'onStateChange'> & { dtls?: DtlsSocket };

/** Starts this transport's DTLS handshake as soon as werift makes its client, when it is the client. */
export function startDtlsAtOnce(transport: DtlsHost): void {
  const start = (): void => {
    if (transport.role !== 'client' || !transport.dtls) return;
    const dtls = transport.dtls as DtlsClient; // the client role's socket
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
