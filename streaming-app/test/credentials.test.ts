// A STUN/TURN server on a loopback address is used only when it answers here: in a container the
// platform's 127.0.0.1 is the container itself, and werift held the first frame ~7 s trying to reach it.
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { test } from 'node:test';
import { stunAnswers } from '../src/credentials.ts';
import { FFMPEG, freeUdpRange, missingTools, startApp, WeriftViewer } from './helpers.ts';

test('stunAnswers: yes for a server that replies, no for a port nobody listens on', async (t) => {
  const server = createSocket('udp4');
  t.after(() => server.close());
  server.on('message', (message, from) => server.send(message, from.port, from.address));
  await new Promise<void>((resolve) => server.bind(0, '127.0.0.1', resolve));
  assert.equal(await stunAnswers('127.0.0.1', server.address().port, 1000), true);
  const unused = await freeUdpRange(1);
  assert.equal(await stunAnswers('127.0.0.1', unused.min, 300), false);
});

test('credentials naming a loopback server that does not answer are left out of the app\'s peer connection', { skip: missingTools([FFMPEG]) }, async (t) => {
  const app = await startApp();
  t.after(() => app.stop());
  const unused = await freeUdpRange(1);
  const posted = await fetch(app.controlUrl('/v1/streaming/creds'), {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ stunIp: '127.0.0.1', stunPort: unused.min, username: '1:s', password: 'p' }),
  });
  assert.equal(posted.status, 200);
  const viewer = new WeriftViewer(app.signalingUrl());
  t.after(() => viewer.close());
  await viewer.hello();
  const offer = await app.waitForLog((l) => l.msg === 'offer sent');
  assert.equal(offer.withStunTurn, false);
  assert.ok(app.logs.some((l) => l.msg.includes('does not answer here')));
  await viewer.waitForFrames(10);
});
