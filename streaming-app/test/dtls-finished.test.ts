// werift's DTLS client and server over an in-memory link that behaves as a browser's DTLS does: the
// server drops a record number it has already seen (replay protection), and the server's last flight
// (ChangeCipherSpec + Finished) is lost once. The client's retransmitted Finished must reach the server
// under a fresh record number, or the server never resends its flight and the handshake hangs (as it did
// against Chromium at 5 % loss; network.test.ts runs that for real).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DtlsClient, DtlsServer } from 'werift';
import { dtlsKeys, endpoint, recordsOf } from './dtls-link.ts';
import { renumberFinished } from '../src/dtls-finished.ts';
import { createLogger } from '../src/logger.ts';

test('a retransmitted Finished goes under a fresh record number, so a peer that lost its last flight sends it again', async () => {
  const seenByServer = new Set<string>();
  const finishedNumbers: number[] = [];
  let serverFinishedLost = false;
  // What the client sends reaches the server's endpoint, and the other way round; werift's sockets read their endpoint's onData.
  const clientSide = endpoint((data) => {
    const fresh = recordsOf(data).filter((r) => {
      if (r.type === 22 && r.epoch === 1) finishedNumbers.push(r.sequence);
      const key = `${r.epoch}:${r.sequence}`;
      if (seenByServer.has(key)) return false;
      seenByServer.add(key);
      return true;
    });
    if (fresh.length > 0) serverSide.onData(Buffer.concat(fresh.map((r) => r.bytes)), ['127.0.0.1', 1]);
  });
  const serverSide = endpoint((data) => {
    if (!serverFinishedLost && recordsOf(data).some((r) => r.type === 22 && r.epoch === 1)) {
      serverFinishedLost = true;
      return;
    }
    clientSide.onData(data, ['127.0.0.1', 2]);
  });
  const keys = await dtlsKeys();
  const server = new DtlsServer({ ...keys, transport: serverSide, certificateRequest: true });
  const client = new DtlsClient({ ...keys, transport: clientSide });
  renumberFinished(client, createLogger('silent'));
  const connected = new Promise<void>((resolve) => client.onConnect.once(() => resolve()));
  await client.connect().catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no handshake; Finished record numbers ${finishedNumbers}`)), 10_000); });
  await Promise.race([connected, hung]).finally(() => clearTimeout(timer));
  assert.ok(serverFinishedLost, 'the server\'s Finished was lost once');
  assert.ok(finishedNumbers.length >= 2, `the client sent its Finished ${finishedNumbers.length} times`);
  assert.equal(new Set(finishedNumbers).size, finishedNumbers.length, `each Finished has a record number of its own: ${finishedNumbers}`);
  // Application data after the handshake still gets through (the renumbering took werift's own counter).
  const received = new Promise<Buffer>((resolve) => server.onData.once((data) => resolve(data)));
  await client.send(Buffer.from('after the handshake'));
  assert.equal((await received).toString(), 'after the handshake');
});
