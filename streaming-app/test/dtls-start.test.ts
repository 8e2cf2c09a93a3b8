// werift's DTLS client starts its handshake 100 ms after its transport announces 'connecting'; the app
// starts it at once. A real werift DtlsClient, in the transport werift would hold it in, against a real
// werift DtlsServer over an in-memory link that records the client's datagrams.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DtlsClient, DtlsServer, Event, type DtlsSocket } from 'werift';
import { dtlsKeys, endpoint } from './dtls-link.ts';
import { startDtlsAtOnce } from '../src/dtls-start.ts';

type DtlsState = 'new' | 'connecting' | 'connected' | 'closed' | 'failed';


/** A datagram starting with a handshake record of epoch 0 whose message is a ClientHello (type 1). */
const isClientHello = (datagram: Buffer): boolean => datagram[0] === 22 && datagram.readUInt16BE(3) === 0 && datagram[13] === 1;

test('the ClientHello leaves when the transport starts connecting, and werift\'s own later call starts no second handshake', async () => {
  const fromClient: Buffer[] = [];
  const clientSide = endpoint((data) => {
    fromClient.push(data);
    serverSide.onData(data, ['127.0.0.1', 1]);
  });
  const serverSide = endpoint((data) => clientSide.onData(data, ['127.0.0.1', 2]));
  const keys = await dtlsKeys();
  const server = new DtlsServer({ ...keys, transport: serverSide, certificateRequest: true });
  const transport: { state: DtlsState; role: 'client'; onStateChange: Event<[DtlsState]>; dtls?: DtlsSocket } = { state: 'new', role: 'client', onStateChange: new Event() };
  startDtlsAtOnce(transport);

  // As werift's RTCDtlsTransport.start does: announce 'connecting', then make the client synchronously.
  transport.state = 'connecting';
  transport.onStateChange.execute('connecting');
  const client = new DtlsClient({ ...keys, transport: clientSide });
  transport.dtls = client;
  // Nobody else calls connect here: the handshake completes only if the app started it.
  const connected = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 10_000);
    client.onConnect.once(() => { clearTimeout(timer); resolve(true); });
  });
  assert.ok(connected, 'the handshake ran without werift\'s own call');
  const hellos = fromClient.filter(isClientHello).length; // werift's server asks for a cookie: two
  await client.connect(); // werift's own call, 100 ms on
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(fromClient.filter(isClientHello).length, hellos, 'no new ClientHello: no second handshake');
  client.close();
  server.close();
});
