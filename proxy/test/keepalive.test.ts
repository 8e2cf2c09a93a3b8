// Keepalive: pings keep an idle tunnel open far beyond the idle timeouts; a silent browser is dropped
// as a lost connection. Timeouts are shortened (300 ms) so the test is quick; only events are asserted.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { FrameBoundary } from '../src/relay.ts';
import { closed, expectOpen, openWebSocket, roundTrip } from './helpers/browser.ts';
import { startFakePlatform, type FakePlatform } from './helpers/platform-upstream.ts';
import { startProxy, type RunningProxy } from './helpers/proxy.ts';

const SHORT = { PROXY_TIMEOUT_CLIENT_MS: '300', PROXY_TIMEOUT_SERVER_MS: '300', PROXY_PING_INTERVAL_MS: '100' };

function frame(opcode: number, payloadLength: number, masked: boolean): Buffer {
  const header = payloadLength < 126 ? 2 : payloadLength < 65_536 ? 4 : 10;
  const buffer = Buffer.alloc(header + (masked ? 4 : 0) + payloadLength, 0x61);
  buffer[0] = 0x80 | opcode;
  buffer[1] = (masked ? 0x80 : 0) | (header === 2 ? payloadLength : header === 4 ? 126 : 127);
  if (header === 4) buffer.writeUInt16BE(payloadLength, 2);
  if (header === 10) buffer.writeBigUInt64BE(BigInt(payloadLength), 2);
  return buffer;
}

describe('FrameBoundary', () => {
  test('knows frame ends whatever the chunking: every split of a stream of mixed frames', () => {
    const frames = [frame(1, 5, true), frame(2, 300, false), frame(2, 70_000, true), frame(9, 0, true), frame(1, 125, false)];
    const stream = Buffer.concat(frames);
    const ends = new Set<number>([0]);
    let position = 0;
    for (const each of frames) ends.add(position += each.length);
    for (const chunkSize of [1, 2, 3, 7, 13, 64, 1000, stream.length]) {
      const tracker = new FrameBoundary();
      for (let offset = 0; offset < stream.length; offset += chunkSize) {
        const end = Math.min(offset + chunkSize, stream.length);
        tracker.feed(stream.subarray(offset, end));
        assert.equal(tracker.atBoundary, ends.has(end), `chunk size ${chunkSize}, after byte ${end}`);
      }
    }
  });
});

describe('keepalive', () => {
  let platform: FakePlatform;
  let running: RunningProxy;

  before(async () => {
    platform = await startFakePlatform();
    running = await startProxy(platform, undefined, SHORT);
  });
  after(async () => {
    await running.close();
    await platform.close();
  });

  test('an idle tunnel stays open past many client and server timeouts; both sides are pinged', async () => {
    const { ws } = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
    let browserPings = 0;
    ws.on('ping', () => { browserPings++; });
    const platformPingsBefore = platform.pings;
    await sleep(1_500); // idle for five times the 300 ms timeouts
    assert.equal(ws.readyState, ws.OPEN);
    assert.ok(browserPings >= 2, `browser pinged ${browserPings} times`);
    assert.ok(platform.pings - platformPingsBefore >= 2, `platform pinged ${platform.pings - platformPingsBefore} times`);
    assert.equal(await roundTrip(ws, 'still here'), 'still here');
    ws.close(1000, 'bye');
    await closed(ws);
  });

  test('a clean close travels to the platform as a clean close', async () => {
    const { ws } = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
    const count = platform.closes.length;
    ws.close(1000, 'bye');
    await closed(ws);
    while (platform.closes.length === count) await sleep(10);
    assert.equal(platform.closes.at(-1), 1000);
  });

  test('a browser that stops answering is dropped; the platform sees a lost connection (1006), not a goodbye', async () => {
    const socket = net.connect(running.port, '127.0.0.1');
    await once(socket, 'connect');
    socket.write([
      'GET /sign_in HTTP/1.1', `Host: 127.0.0.1:${running.port}`, 'Upgrade: websocket', 'Connection: Upgrade',
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==', 'Sec-WebSocket-Version: 13', '', '',
    ].join('\r\n'));
    const [head] = await once(socket, 'data') as [Buffer];
    assert.match(head.toString('latin1'), /^HTTP\/1\.1 101/);
    const count = platform.closes.length;
    // This "browser" reads but never answers a ping.
    socket.resume();
    await once(socket, 'close');
    while (platform.closes.length === count) await sleep(10);
    assert.equal(platform.closes.at(-1), 1006);
    assert.ok(running.logs.some((line) => line.msg === 'browser silent for its whole timeout; tunnel dropped'));
  });
});
