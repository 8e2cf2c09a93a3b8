// What the DTLS tests give werift's DtlsClient and DtlsServer: an in-memory datagram endpoint and a
// certificate to run the handshake with.
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
