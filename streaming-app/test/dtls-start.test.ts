// The app starts werift's DTLS client at once (werift waits 100 ms) and resends a flight the server has not
// answered after two ICE round trips (werift waits 0.5 s). A real werift DtlsClient, in the transport werift
// would hold it in and with the app's renumbered Finished (dtls-finished.ts) as in PeerLink, against a real
// werift DtlsServer over an in-memory link that records the client's datagrams, drops records the server
// has seen (a browser's replay protection) and can lose datagrams either way. The app's resend timer runs
// on node:test's mock clock, werift's own timers (node:timers/promises) on the real one: a resend seen on
// the event loop's next turn after the mock clock moves is the app's.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { DtlsClient, DtlsServer, Event, type DtlsSocket } from 'werift';
import { dtlsKeys, endpoint, recordsOf } from './dtls-link.ts';
import { renumberFinished } from '../src/dtls-finished.ts';
import { firstResendMs, startDtlsAtOnce } from '../src/dtls-start.ts';
import { createLogger } from '../src/logger.ts';

type DtlsState = 'new' | 'connecting' | 'connected' | 'closed' | 'failed';
type Lose = (datagram: Buffer) => boolean;

/** The handshake message type of a datagram starting with a handshake record of epoch 0, else undefined. */
const handshakeType = (datagram: Buffer): number | undefined =>
  datagram[0] === 22 && datagram.readUInt16BE(3) === 0 ? datagram[13] : undefined;
const CLIENT_HELLO = 1;
const CERTIFICATE = 11; // the first message of the client's flight 5 (the server asks for its certificate)
/** A datagram holding an encrypted handshake record: a Finished. */
const hasFinished = (datagram: Buffer): boolean => recordsOf(datagram).some((r) => r.type === 22 && r.epoch === 1);

/**
 * A client and a server over the in-memory link, the client started as werift's RTCDtlsTransport starts
 * it (announce 'connecting', make the client synchronously), with the app's start-up in place. The link
 * loses the datagrams for which `lose` (the client's) or `loseFromServer` says so.
 */
async function handshake(options: { rttSeconds?: number; lose?: Lose; loseFromServer?: Lose } = {}) {
  const fromClient: Buffer[] = [];
  const seenByServer = new Set<string>();
  const clientSide = endpoint((data) => {
    fromClient.push(data);
    if (options.lose?.(data)) return;
    const fresh = recordsOf(data).filter((r) => !seenByServer.has(`${r.epoch}:${r.sequence}`));
    for (const r of fresh) seenByServer.add(`${r.epoch}:${r.sequence}`);
    if (fresh.length > 0) serverSide.onData(Buffer.concat(fresh.map((r) => r.bytes)), ['127.0.0.1', 1]);
  });
  const serverSide = endpoint((data) => { if (!options.loseFromServer?.(data)) clientSide.onData(data, ['127.0.0.1', 2]); });
  const keys = await dtlsKeys();
  const server = new DtlsServer({ ...keys, transport: serverSide, certificateRequest: true });
  const transport: { state: DtlsState; role: 'client'; onStateChange: Event<[DtlsState]>; dtls?: DtlsSocket; iceTransport: { connection: { nominated: { rtt?: number } } } } =
    { state: 'new', role: 'client', onStateChange: new Event(), iceTransport: { connection: { nominated: { rtt: options.rttSeconds } } } };
  startDtlsAtOnce(transport);
  transport.state = 'connecting';
  transport.onStateChange.execute('connecting');
  const client = new DtlsClient({ ...keys, transport: clientSide });
  transport.dtls = client;
  renumberFinished(client, createLogger('silent'));
  const connected = new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 10_000);
    client.onConnect.once(() => { clearTimeout(timer); resolve(true); });
  });
  const sent = (type: number): number => fromClient.filter((datagram) => handshakeType(datagram) === type).length;
  const close = (): void => { client.close(); server.close(); };
  return { client, connected, sent, fromClient, close };
}

/** Moves the mock clock on, and lets the link deliver (and record) what that sent. */
async function tick(t: TestContext, ms: number): Promise<void> {
  t.mock.timers.tick(ms);
  await new Promise((resolve) => setImmediate(resolve));
}

/** Lets the event loop turn until `condition` holds (the in-memory link delivers on setImmediate). */
async function until(condition: () => boolean): Promise<void> {
  for (let turn = 0; turn < 10_000 && !condition(); turn++) await new Promise((resolve) => setImmediate(resolve));
  assert.ok(condition(), 'the condition held within 10,000 turns of the event loop');
}

test('the ClientHello leaves when the transport starts connecting, and werift\'s own later call starts no second handshake', async () => {
  const link = await handshake();
  // Nobody else calls connect here: the handshake completes only if the app started it.
  assert.ok(await link.connected, 'the handshake ran without werift\'s own call');
  const hellos = link.sent(CLIENT_HELLO); // werift's server asks for a cookie: two
  await link.client.connect(); // werift's own call, 100 ms on
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(link.sent(CLIENT_HELLO), hellos, 'no new ClientHello: no second handshake');
  link.close();
});

test('a lost ClientHello goes again after two ICE round trips, before werift\'s own timer', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  let lost = 0;
  const link = await handshake({ rttSeconds: 0.08, lose: (datagram) => handshakeType(datagram) === CLIENT_HELLO && lost++ === 0 });
  await until(() => link.sent(CLIENT_HELLO) === 1);
  await tick(t, 159);
  assert.equal(link.sent(CLIENT_HELLO), 1, 'not before two round trips');
  await tick(t, 1);
  assert.equal(link.sent(CLIENT_HELLO), 2, 'sent again at 160 ms');
  await until(() => link.client.connected);
  link.close();
});

test('a lost flight 5 goes again, and the same flight again after twice the wait while it stays unanswered', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  // The flight's first two copies are lost whole: from the first Certificate up to the third.
  let certificates = 0;
  const link = await handshake({ rttSeconds: 0.001, lose: (datagram) => {
    if (handshakeType(datagram) === CERTIFICATE) certificates++;
    return certificates === 1 || certificates === 2;
  } });
  await until(() => link.sent(CERTIFICATE) === 1);
  await tick(t, firstResendMs(0.001));
  assert.equal(link.sent(CERTIFICATE), 2, 'sent again after the shortest wait (the round trip is 1 ms)');
  await tick(t, 2 * firstResendMs(0.001) - 1);
  assert.equal(link.sent(CERTIFICATE), 2);
  await tick(t, 1);
  assert.equal(link.sent(CERTIFICATE), 3, 'and again after twice that');
  await until(() => link.client.connected);
  const datagrams = link.fromClient.length;
  await tick(t, 60_000);
  assert.equal(link.fromClient.length, datagrams, 'nothing more once the handshake is done');
  link.close();
});

test('when the server\'s last flight was lost, the resent flight 5 carries a fresh Finished, and the server answers it', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  let serverFinishedLost = false;
  const link = await handshake({ rttSeconds: 0.001, loseFromServer: (datagram) => !serverFinishedLost && hasFinished(datagram) && (serverFinishedLost = true) });
  await until(() => serverFinishedLost);
  const finishedNumbers = (): number[] => link.fromClient.flatMap((d) => recordsOf(d)).filter((r) => r.type === 22 && r.epoch === 1).map((r) => r.sequence);
  assert.equal(finishedNumbers().length, 1);
  await tick(t, firstResendMs(0.001));
  assert.equal(finishedNumbers().length, 2, 'the flight went again');
  assert.equal(new Set(finishedNumbers()).size, 2, `under a record number of its own: ${finishedNumbers()}`);
  await until(() => link.client.connected);
  link.close();
});

test('the wait before a resend: two round trips, at least 100 ms, at most werift\'s own 500 ms, 250 ms unmeasured', () => {
  assert.equal(firstResendMs(0.08), 160);
  assert.equal(firstResendMs(0.001), 100);
  assert.equal(firstResendMs(0.4), 500);
  assert.equal(firstResendMs(undefined), 250);
});
