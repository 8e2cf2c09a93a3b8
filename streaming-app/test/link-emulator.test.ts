// The userspace link emulator on real sockets: a UDP echo inside the shaped link's browser namespace,
// datagrams from the host through the router, their round trips and losses measured here and compared
// with what the emulator was told and what it counted.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { stretchedByLoad } from './helpers.ts';
import { NO_IMPAIRMENT, ShapedLink, shapedLinkUnavailable, symmetric } from './shaped-link.ts';

const ECHO = `const s = require('node:dgram').createSocket('udp4');
s.on('message', (m, r) => s.send(m, r.port, r.address));
s.bind(0, () => console.log(s.address().port));`;

type Trip = { rttMs: number | undefined };

/** Sends `count` datagrams `gapMs` apart and waits a while for the echoes: one round trip each, or undefined. */
async function roundTrips(socket: Socket, address: string, port: number, count: number, gapMs: number): Promise<Trip[]> {
  const sentAt = new Map<number, number>();
  const trips: Trip[] = Array.from({ length: count }, () => ({ rttMs: undefined }));
  const onMessage = (message: Buffer) => {
    const seq = message.readUInt32BE(0);
    const at = sentAt.get(seq);
    if (at !== undefined && trips[seq]) trips[seq].rttMs = performance.now() - at;
  };
  socket.on('message', onMessage);
  for (let seq = 0; seq < count; seq++) {
    const datagram = Buffer.alloc(200);
    datagram.writeUInt32BE(seq, 0);
    sentAt.set(seq, performance.now());
    socket.send(datagram, port, address);
    await new Promise((r) => setTimeout(r, gapMs));
  }
  await new Promise((r) => setTimeout(r, stretchedByLoad(1000)));
  socket.off('message', onMessage);
  return trips;
}

const sorted = (trips: Trip[]): number[] => trips.flatMap((t) => t.rttMs === undefined ? [] : [t.rttMs]).sort((a, b) => a - b);
const at = (values: number[], p: number): number => values[Math.min(values.length - 1, Math.floor(p * values.length))];

describe('the userspace link emulator (TUN in the router namespace, socat, link-emulator.ts)', { skip: shapedLinkUnavailable() }, () => {
  let link: ShapedLink;
  let echo: ChildProcess;
  let echoPort: number;
  let socket: Socket;

  before(async () => {
    link = await ShapedLink.create(100_000, 11);
    echo = spawn('ip', ['netns', 'exec', link.namespace, process.execPath, '-e', ECHO], { stdio: ['ignore', 'pipe', 'inherit'] });
    const [line] = await once(echo.stdout!, 'data') as [Buffer];
    echoPort = Number(line.toString().trim());
    socket = createSocket('udp4');
    await new Promise<void>((resolve) => socket.bind(0, link.hostAddress, resolve));
  });
  after(async () => {
    socket?.close();
    if (echo?.pid && echo.pid > 0 && echo.exitCode === null) {
      echo.kill('SIGTERM');
      await once(echo, 'exit');
    }
    await link?.destroy();
  });

  test('the kernel path alone: every datagram back, well under the delay a profile adds', async () => {
    const trips = await roundTrips(socket, link.peerAddress, echoPort, 200, 2);
    const rtts = sorted(trips);
    assert.equal(rtts.length, 200);
    assert.ok(at(rtts, 0.5) < 20, `median round trip ${at(rtts, 0.5).toFixed(2)} ms with no emulator`);
  });

  test('RTT 60 ms ± 5 ms jitter each way: round trips from 50 ms, centred on 60, spread by the jitter', async (t) => {
    await link.impair(symmetric(60, 5));
    const before = await link.emulatorStats();
    const trips = await roundTrips(socket, link.peerAddress, echoPort, 400, 5);
    const rtts = sorted(trips);
    const median = at(rtts, 0.5);
    const spread = at(rtts, 0.9) - at(rtts, 0.1);
    const stats = await link.emulatorStats();
    const lateMs = stats ? (stats.down.lateMsTotal + stats.up.lateMsTotal) / (stats.down.passed + stats.up.passed) : 0;
    const missing = trips.flatMap((t, i) => t.rttMs === undefined ? [i] : []);
    const passed = stats && before ? `emulator passed ${stats.down.passed - before.down.passed} down, ${stats.up.passed - before.up.passed} up` : '';
    const diagnostic = `p10 ${at(rtts, 0.1).toFixed(1)}, median ${median.toFixed(1)}, p90 ${at(rtts, 0.9).toFixed(1)} ms; emulator's own lateness ${lateMs.toFixed(2)} ms a packet; `
      + `${passed}; missing ${JSON.stringify(missing)}`;
    t.diagnostic(diagnostic);
    // No loss configured. One datagram of 400 was seen missing once on a loaded machine (cause not
    // found: the emulator's counts tell whether it got that far); more than that is a fault.
    assert.ok(rtts.length >= 398, `no loss configured: ${diagnostic}`);
    assert.ok(rtts[0] >= 50, `the shortest round trip is at least 2 × (30 − 5) ms: ${diagnostic}`);
    assert.ok(median >= 59, `median round trip: ${diagnostic}`);
    // An upper bound only as generous as a loaded machine needs (timers fire late there).
    assert.ok(median <= 60 + stretchedByLoad(30), `median round trip: ${diagnostic}`);
    assert.ok(spread >= 4, `jitter shows in the spread: ${diagnostic}`);
  });

  test('5 % loss each way: about 1 − 0.95² of round trips lost, exactly the packets the emulator counts as dropped', async (t) => {
    await link.impair(NO_IMPAIRMENT_BOTH);
    const before = await link.emulatorStats();
    await link.impair(symmetric(0, 0, 0.05));
    const trips = await roundTrips(socket, link.peerAddress, echoPort, 1000, 2);
    const after = await link.emulatorStats();
    assert.ok(before && after);
    const lost = trips.filter((t) => t.rttMs === undefined).length;
    const dropped = (after.down.dropped - before.down.dropped) + (after.up.dropped - before.up.dropped);
    t.diagnostic(`${lost} of 1000 round trips lost, ${dropped} dropped by the emulator`);
    // 9.75 % expected; ± 4 standard deviations of a binomial over 1000.
    assert.ok(lost >= 60 && lost <= 135, `${lost} of 1000 round trips lost`);
    assert.equal(lost, dropped, 'every loss is one the emulator made');
    assert.equal(after.down.passed + after.down.dropped - before.down.passed - before.down.dropped, 1000, 'all 1000 went through the emulator');
  });

  test('no impairment takes the emulator out of the path again', async () => {
    await link.impair(NO_IMPAIRMENT_BOTH);
    const before = await link.emulatorStats();
    const rtts = sorted(await roundTrips(socket, link.peerAddress, echoPort, 100, 2));
    const after = await link.emulatorStats();
    assert.equal(rtts.length, 100);
    assert.equal(after!.down.passed, before!.down.passed, 'the kernel forwards on its own');
  });
});

const NO_IMPAIRMENT_BOTH = { down: NO_IMPAIRMENT, up: NO_IMPAIRMENT };
