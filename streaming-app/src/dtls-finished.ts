// werift's DTLS client retransmits its last handshake flight as the very same records, record numbers
// included. A browser drops a record number it has seen (replay protection), and once it has finished its
// side it resends its own last flight (ChangeCipherSpec + Finished) only when a retransmitted Finished gets
// through. So when that last flight was lost, every retransmission was dropped and the handshake hung until
// werift gave up after 33 s (about one session in four at 5 % loss each way). Here each retransmitted
// Finished is encrypted again under a fresh record number, as RFC 6347 (4.1) asks of every record.
import type { DtlsSocket, RTCDtlsTransport } from 'werift';
import type { Logger } from './logger.ts';

const HANDSHAKE = 22;

/** Renumbers this transport's retransmitted Finished while it is the DTLS client and the handshake runs. */
export function renumberRetransmittedFinished(transport: RTCDtlsTransport, log: Logger): void {
  const hook = (): void => {
    if (transport.role === 'client' && transport.dtls) renumberFinished(transport.dtls, log);
  };
  // werift makes its DTLS socket right after announcing 'connecting' and sends the first record 100 ms later.
  if (transport.state === 'connecting') hook();
  else transport.onStateChange.once((state) => { if (state === 'connecting') queueMicrotask(hook); });
}

/** Renumbers the retransmitted Finished of a DTLS client socket until it connects. */
export function renumberFinished(socket: DtlsSocket, log: Logger): void {
  const { cipher, dtls, transport } = socket;
  const encrypt = cipher.encryptPacket.bind(cipher);
  const send = transport.send;
  let finished: { packet: Parameters<typeof encrypt>[0]; plaintext: Buffer; sent: boolean } | undefined;
  cipher.encryptPacket = (packet) => {
    const { contentType, epoch } = packet.recordLayerHeader;
    // The only encrypted handshake record a DTLS 1.2 client sends is its Finished.
    if (contentType === HANDSHAKE && epoch === 1) finished = { packet, plaintext: Buffer.from(packet.fragment), sent: false };
    return encrypt(packet);
  };
  const renumbering: typeof send = (buf, addr) => {
    if (!finished || !isFinished(buf)) return send(buf, addr);
    if (!finished.sent) {
      finished.sent = true;
      return send(buf, addr);
    }
    const { packet, plaintext } = finished;
    packet.fragment = Buffer.from(plaintext);
    packet.recordLayerHeader.sequenceNumber = ++dtls.recordSequenceNumber;
    log.debug({ recordNumber: dtls.recordSequenceNumber }, 'DTLS Finished retransmitted under a fresh record number');
    return send(encrypt(packet).serialize(), addr);
  };
  // `send` is a readonly field in werift's types; werift's flights look it up on every send.
  Object.assign(transport, { send: renumbering });
  socket.onConnect.once(() => {
    cipher.encryptPacket = encrypt;
    Object.assign(transport, { send });
  });
}

/** A datagram holding one epoch-1 handshake record: its type byte, then version (2 bytes), then epoch. */
const isFinished = (buf: Buffer): boolean => buf.length > 13 && buf[0] === HANDSHAKE && buf.readUInt16BE(3) === 1;
