// What the DTLS tests give werift's DtlsClient and DtlsServer: an in-memory datagram endpoint and a
// certificate to run the handshake with, and a reader of the records a datagram holds.
import { CipherContext, HashAlgorithm, NamedCurveAlgorithm, SignatureAlgorithm, type Transport } from 'werift';

/** An endpoint whose datagrams go to `deliver` on a later turn of the event loop, as a socket's would. */
export function endpoint(deliver: (data: Buffer) => void): Transport {
  return {
    type: 'udp', closed: false, address: { address: '127.0.0.1', port: 0, family: 'IPv4' },
    onData: () => {},
    send: async (data) => { setImmediate(() => deliver(data)); },
    close: async () => {},
  } as Transport;
}

/** DtlsClient / DtlsServer options with a fresh ECDSA certificate, as a browser would use. */
export async function dtlsKeys() {
  const { certPem, keyPem, signatureHash } = await CipherContext.createSelfSignedCertificateWithKey(
    { signature: SignatureAlgorithm.ecdsa_3, hash: HashAlgorithm.sha256_4 }, NamedCurveAlgorithm.secp256r1_23);
  return { cert: certPem, key: keyPem, signatureHash, extendedMasterSecret: true as const };
}

export type DtlsRecord = { type: number; epoch: number; sequence: number; bytes: Buffer };

/** The records of one datagram: type (1 byte), version (2), epoch (2), sequence number (6), length (2), body. */
export function recordsOf(datagram: Buffer): DtlsRecord[] {
  const records: DtlsRecord[] = [];
  for (let at = 0; at + 13 <= datagram.length;) {
    const end = at + 13 + datagram.readUInt16BE(at + 11);
    records.push({ type: datagram[at]!, epoch: datagram.readUInt16BE(at + 3), sequence: datagram.readUIntBE(at + 5, 6), bytes: datagram.subarray(at, end) });
    at = end;
  }
  return records;
}
