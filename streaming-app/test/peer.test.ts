// PeerLink's ICE gathering asks the STUN server the platform gave, or none: werift alone falls back to
// Google's public one. A real PeerLink gathering on loopback; the given STUN server is a UDP socket of the
// test's, which sees the binding request arrive.
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { test } from 'node:test';
import { PeerLink } from '../src/peer.ts';
import type { IceServer } from '../src/credentials.ts';
import { createLogger } from '../src/logger.ts';
import { BIND_ADDRESS, freeUdpRange } from './helpers.ts';

async function peer(iceServers: IceServer[]): Promise<PeerLink> {
  return new PeerLink({
    iceServers, portRange: await freeUdpRange(2), bindAddress: BIND_ADDRESS, codec: 'H264', audio: false, lipSync: false, videoFec: false,
    log: createLogger('silent'), onCandidate: () => {}, onState: () => {}, onMediaReady: () => {}, onInput: () => {},
    onKeyframeRequest: () => {}, onInputChannelOpen: () => {},
  });
}

test('given no STUN server the peer asks none (werift alone would ask Google\'s); given one, it asks that one', async (t) => {
  const none = await peer([]);
  t.after(() => none.close());
  await none.createOffer();
  assert.deepEqual(none.pc.iceTransports.map((transport) => transport.connection.stunServer), [undefined]);

  const stun = createSocket('udp4');
  t.after(() => stun.close());
  stun.bind(0, '127.0.0.1');
  await once(stun, 'listening');
  const given = await peer([{ urls: `stun:127.0.0.1:${stun.address().port}` }]);
  t.after(() => given.close());
  const request = once(stun, 'message');
  await given.createOffer();
  const [message] = await request as [Buffer];
  assert.equal(message.readUInt16BE(0), 0x0001, 'a STUN binding request reached the given server');
});
